"""Gateway overhead against direct replica access, measured side by side in one run.

An upstream with a fixed timing (first token after --first-ms, then --tokens chunks --gap-ms apart) runs
in its own process; the gateway (`chaos reference gateway`, real process) sits in front of it. A plain
asyncio client (aiohttp) drives --streams concurrent streamed requests, alternating rounds direct and
through the gateway, and reports TTFT P50/P99 of each, the TTFT the gateway adds, and throughput.

    python bench/gateway_overhead.py            # 50 concurrent streams, 6 rounds of each
    python bench/gateway_overhead.py --quick

On a 2-core machine the client, the upstream and the gateway share the cores: the added TTFT includes
the gateway's CPU time competing with the others, which is the honest figure for this box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp

UPSTREAM = r'''
import asyncio, json, sys
from aiohttp import web
first, gap, tokens = float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000, int(sys.argv[4])
chunk = b"data: " + json.dumps({"id": "x", "object": "text_completion", "model": "m",
                                "choices": [{"index": 0, "text": "tok", "finish_reason": None}]}).encode() + b"\n\n"
async def gen(request):
    await request.read()
    r = web.StreamResponse(headers={"Content-Type": "text/event-stream", "x-served-by": "u0"})
    await r.prepare(request)
    await asyncio.sleep(first)
    for i in range(tokens):
        if i: await asyncio.sleep(gap)
        await r.write(chunk)
    await r.write(b"data: [DONE]\n\n")
    return r
async def health(request):
    return web.Response()
app = web.Application()
app.router.add_post("/v1/completions", gen)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
'''


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, timeout=30):
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def one(session, url) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    ttft, n = None, 0
    async with session.post(url, json={"model": "m", "prompt": "x", "max_tokens": 16, "stream": True}) as r:
        async for line in r.content:
            if line.startswith(b"data: {"):
                n += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    return ttft, time.perf_counter() - t0, n


async def round_(url, streams, per_stream) -> tuple[list[float], float, int]:
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def worker():
            out = []
            for _ in range(per_stream):
                out.append(await one(s, url))
            return out
        t0 = time.perf_counter()
        results = [x for w in await asyncio.gather(*(worker() for _ in range(streams))) for x in w]
        wall = time.perf_counter() - t0
    return [r[0] for r in results], wall, sum(r[2] for r in results)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-stream", type=int, default=10, help="requests each stream sends per round")
    ap.add_argument("--first-ms", type=float, default=20)
    ap.add_argument("--gap-ms", type=float, default=5)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.per_stream = 2, 4
    up_port, procs = free_port(), []
    try:
        procs.append(subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up_port), str(a.first_ms), str(a.gap_ms),
                                       str(a.tokens)], start_new_session=True))
        wait_up(f"http://127.0.0.1:{up_port}/health")
        gw_port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "chaos", "reference", "gateway", "--port", str(gw_port),
                                       "--upstream", f"u0=http://127.0.0.1:{up_port}", "--max-concurrency", "1000",
                                       "--settings", json.dumps({"health_interval_s": 1.0})],
                                      stdout=subprocess.DEVNULL, start_new_session=True))
        wait_up(f"http://127.0.0.1:{gw_port}/health")
        urls = {"direct": f"http://127.0.0.1:{up_port}/v1/completions",
                "gateway": f"http://127.0.0.1:{gw_port}/v1/completions"}
        asyncio.run(round_(urls["gateway"], a.streams, 1))  # warm both paths
        asyncio.run(round_(urls["direct"], a.streams, 1))
        ttft = {"direct": [], "gateway": []}
        rate = {"direct": [], "gateway": []}
        print(f"{a.streams} concurrent streams, {a.tokens} chunks each (first after {a.first_ms:g} ms, then every "
              f"{a.gap_ms:g} ms), {a.rounds} alternating rounds of {a.per_stream} requests per stream\n")
        print(f"{'round':>5}  {'path':<8} {'requests':>8} {'wall s':>7} {'req/s':>7} {'chunks/s':>9} "
              f"{'TTFT p50':>9} {'TTFT p99':>9}")
        for i in range(a.rounds):
            order = ("direct", "gateway") if i % 2 == 0 else ("gateway", "direct")
            for path in order:
                t, wall, chunks = asyncio.run(round_(urls[path], a.streams, a.per_stream))
                ttft[path] += t
                rate[path].append((len(t) / wall, chunks / wall))
                print(f"{i + 1:>5}  {path:<8} {len(t):>8} {wall:>7.2f} {len(t) / wall:>7.0f} {chunks / wall:>9.0f} "
                      f"{pct(t, 50) * 1000:>8.1f}m {pct(t, 99) * 1000:>8.1f}m")
        print()
        print(f"{'':<10} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12} {'req/s (median round)':>21}")
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        for path in ("direct", "gateway"):
            print(f"{path:<10} {pct(ttft[path], 50) * 1000:>12.2f} {pct(ttft[path], 99) * 1000:>12.2f} "
                  f"{med([r[0] for r in rate[path]]):>21.0f}")
        add50 = (pct(ttft["gateway"], 50) - pct(ttft["direct"], 50)) * 1000
        add99 = (pct(ttft["gateway"], 99) - pct(ttft["direct"], 99)) * 1000
        ratio = med([r[0] for r in rate["gateway"]]) / med([r[0] for r in rate["direct"]])
        print(f"\nadded by the gateway: TTFT P50 {add50:+.2f} ms, P99 {add99:+.2f} ms; throughput "
              f"{ratio * 100:.0f}% of direct")
        print(f"aim <= 1 ms added at P50: {'MET' if add50 <= 1.0 else 'MISSED'}")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()


if __name__ == "__main__":
    main()
