"""What the LLM fault proxy (chaos proxy llm) adds, with no fault set: direct vs through it, in one run.

The upstream and the streaming client are bench/_relay.py's (an asyncio Protocol upstream in a subprocess: every
streamed POST gets --chunks events --gap-ms apart, so no model compute is measured; a client that only stamps its
reads, the streams' arrivals spread over one stream's length), the proxy in another subprocess. Interleaved
rounds (direct, proxy, [agentbreak] in a rotating order); each figure is the median over rounds of (through -
direct) of that round's percentile. The streaming client used to parse every chunk with StreamReader calls: at
50 and 200 streams on 2 cores it was the busiest process, and this bench read +6.8 / +28 ms where the proxy's
own share was a fraction of it (BENCHMARKS section 8). The small-request and throughput rows keep that client:
one request at a time, its cost is the same on both paths.

  python bench/l7_proxy.py            # 12 rounds
  python bench/l7_proxy.py --quick    # 10 rounds, fewer requests, smaller body

agentbreak (pip, a different LLM chaos proxy) is measured beside it when --agentbreak BIN names its executable
(install it in a throwaway venv: python -m venv /tmp/ab && /tmp/ab/bin/pip install agentbreak==0.4.6); it proxies
only POST /v1/chat/completions and binds 0.0.0.0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import _relay
from _table import print_table



# -- the client ---------------------------------------------------------------------------------------------

async def _request(conn: list, body: dict) -> tuple[float, float | None, list[float], int]:
    """(time to the response head, to the first event, gaps between events, body bytes) in seconds. conn is
    [reader, writer, port]; a kept-alive connection the server closed while idle (uvicorn does after 5 s) is
    opened anew and the request sent again, timed from that send."""
    data = json.dumps(body).encode()
    for attempt in range(2):
        r, w, port = conn
        t0 = time.perf_counter()
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(data), data))
        try:
            head = await r.readuntil(b"\r\n\r\n")
            break
        except (asyncio.IncompleteReadError, ConnectionError):
            if attempt:
                raise
            w.close()
            conn[:] = await _conn(port)
    t_head = time.perf_counter() - t0
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    if m:
        n = int(m.group(1))
        got = 0
        while got < n:
            got += len(await r.read(min(n - got, 1 << 20)))
        return t_head, None, [], n
    first, last, gaps, total = None, None, [], 0
    while True:
        size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await r.readuntil(b"\r\n")
            break
        piece = await r.readexactly(size + 2)
        total += size
        now = time.perf_counter()
        if b"[DONE]" in piece:
            continue
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
    return t_head, first, gaps, total


async def _conn(port: int) -> list:
    r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    return [r, w, port]


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


async def _streams(streams: list, per_conn: int, stagger_s: float) -> dict:
    r = await _relay.one_round(streams, per_conn, stagger_s if len(streams) > 1 else 0.0)
    return {k: v for k, v in r.items() if k != "n"}


async def _keepalive(port: int, conn, n: int) -> dict:
    lat = [(await _request(conn, {"stream": False}))[0] for _ in range(n)]
    return {"ka50": _pct(lat, .5), "ka99": _pct(lat, .99)}


async def _fresh(port: int, n: int) -> dict:
    lat = []
    for _ in range(n):
        t0 = time.perf_counter()
        c = await _conn(port)
        await _request(c, {"stream": False})
        lat.append(time.perf_counter() - t0)
        c[1].close()
    return {"new50": _pct(lat, .5), "new99": _pct(lat, .99)}


async def _big(conn, mb: int) -> dict:
    t0 = time.perf_counter()
    _, _, _, n = await _request(conn, {"big_mb": mb})
    return {"mbps": n / (1 << 20) / (time.perf_counter() - t0)}


async def _bench(targets: dict[str, int], args) -> dict:
    levels = (1, 50, 200)
    conns = {(name, c): await _relay.open_streams(p, c, _relay.chat_request()) for name, p in targets.items()
             for c in levels}
    ka = {name: await _conn(p) for name, p in targets.items()}
    results: dict[str, list[dict]] = {name: [] for name in targets}
    names = list(targets)
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]  # rotate: no target always goes first
        for name in order:
            port, res = targets[name], {}
            for c in levels:
                per = args.seq_streams if c == 1 else 3
                got = await _streams(conns[(name, c)], per, args.stagger_s)
                res.update({f"{k}@{c}": v for k, v in got.items()})
            res.update(await _keepalive(port, ka[name], args.small))
            res.update(await _fresh(port, args.small // 2))
            res.update(await _big(ka[name], args.big_mb))
            results[name].append(res)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    for cs in conns.values():
        for c in cs:
            c.t.close()
    return results


# -- processes ------------------------------------------------------------------------------------------

def _agentbreak(bin_path: str, upstream_port: int, workdir: str) -> tuple[subprocess.Popen, int]:
    port = _relay.free_port()
    os.makedirs(os.path.join(workdir, ".agentbreak"), exist_ok=True)
    with open(os.path.join(workdir, ".agentbreak", "application.yaml"), "w") as f:
        f.write(f"llm:\n  enabled: true\n  mode: proxy\n  upstream_url: http://127.0.0.1:{upstream_port}\n"
                f"mcp:\n  enabled: false\nserve:\n  port: {port}\n")
    with open(os.path.join(workdir, ".agentbreak", "scenarios.yaml"), "w") as f:
        f.write("version: 1\nscenarios: []\n")  # no faults: pass-through cost only
    p = subprocess.Popen([bin_path, "serve"], cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, port
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("agentbreak did not start")


ROWS = [("TTFT P50, 1 stream", "ttft50@1", "ms"), ("TTFT P99, 1 stream", "ttft99@1", "ms"),
        ("inter-token P50, 1 stream", "itl50@1", "ms"), ("inter-token P99, 1 stream", "itl99@1", "ms"),
        ("TTFT P50, 50 streams", "ttft50@50", "ms"), ("TTFT P99, 50 streams", "ttft99@50", "ms"),
        ("inter-token P50, 50 streams", "itl50@50", "ms"), ("inter-token P99, 50 streams", "itl99@50", "ms"),
        ("TTFT P50, 200 streams", "ttft50@200", "ms"), ("TTFT P99, 200 streams", "ttft99@200", "ms"),
        ("inter-token P50, 200 streams", "itl50@200", "ms"), ("inter-token P99, 200 streams", "itl99@200", "ms"),
        ("small request P50, keep-alive", "ka50", "ms"), ("small request P99, keep-alive", "ka99", "ms"),
        ("small request P50, new connection", "new50", "ms"), ("small request P99, new connection", "new99", "ms"),
        ("large body throughput", "mbps", "MiB/s")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 rounds, fewer requests, a 64 MiB body")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--agentbreak", default=shutil.which("agentbreak") or
                    ("/tmp/agentbreak-venv/bin/agentbreak" if os.path.exists("/tmp/agentbreak-venv/bin/agentbreak") else None),
                    help="agentbreak's executable, to measure it beside (default: found on PATH or /tmp/agentbreak-venv)")
    args = ap.parse_args()
    args.rounds = args.rounds or (10 if args.quick else 12)
    args.seq_streams, args.small, args.big_mb = (10, 40, 64) if args.quick else (20, 100, 256)
    args.stagger_s = args.chunks * args.gap_ms / 1000  # arrivals spread over one stream's length (bench/_relay.py)
    procs = []
    try:
        up, up_port = _relay.start_upstream(0.0, args.gap_ms, args.chunks)
        procs.append(up)
        px, px_port = _relay.spawn([sys.executable, "-m", "chaos.proxy.llm", "--listen", "127.0.0.1:0", "--upstream",
                                    f"http://127.0.0.1:{up_port}"], r"listening on http://[^:]+:(\d+)")
        procs.append(px)
        targets = {"direct": up_port, "chaos": px_port}
        ab_note = "agentbreak: not measured (pass --agentbreak BIN; pip install agentbreak==0.4.6 in a venv)"
        if args.agentbreak:
            ab, ab_port = _agentbreak(args.agentbreak, up_port, tempfile.mkdtemp(prefix="l7-agentbreak-"))
            procs.append(ab)
            targets["agentbreak"] = ab_port
            ab_note = f"agentbreak: {args.agentbreak} (llm mode proxy, no scenarios)"
        results = asyncio.run(_bench(targets, args))
    finally:
        _relay.stop(procs)
    headers = ["metric", "direct", "chaos proxy", "chaos added"]
    if "agentbreak" in results:
        headers += ["agentbreak", "agentbreak added"]
    rows = []
    for label, key, unit in ROWS:
        scale = 1000 if unit == "ms" else 1
        med = {n: statistics.median(r[key] for r in rs) * scale for n, rs in results.items()}
        row = [f"{label} ({unit})", med["direct"], med["chaos"]]
        diffs = {n: statistics.median((r[key] - d[key]) * scale for r, d in zip(rs, results["direct"]))
                 for n, rs in results.items() if n != "direct"}
        row.append(diffs["chaos"])
        if "agentbreak" in results:
            row += [med["agentbreak"], diffs["agentbreak"]]
        rows.append(row)
    print(f"LLM fault proxy overhead: {args.rounds} interleaved rounds, {args.chunks} chunks {args.gap_ms:g} ms apart, "
          f"{os.cpu_count()} CPUs; 'added' = median over rounds of (through - direct)")
    print_table(headers, rows)
    print(ab_note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
