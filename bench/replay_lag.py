"""How exactly `chaos load --replay-speed` keeps a trace's timing: sent and lost, order, lag, memory.

Replays a trace (a JSONL replay file, or an Azure LLM inference CSV: TIMESTAMP, ContextTokens, GeneratedTokens,
converted here to small chat bodies) at --speed against a fast local SSE server on loopback, through the real
driver and Locust, and prints beside it a plain asyncio replayer (aiohttp, one task a request, the same log and
server) as the floor a replayer can reach on this machine:

  python bench/replay_lag.py                                    # a generated bursty log (2,000 requests)
  python bench/replay_lag.py --trace ../shared/data/azure-llm-inference-2023-conv.sample5000.csv --rows 2000

Figures: requests of the window sent / not sent, how many the server saw (each once?), order violations
(client: a send before one intended earlier; server: an arrival before one intended more than 50 ms earlier),
lag (actual - intended send time) P50/P99/max, the Locust process's peak RSS (VmHWM) and CPU time a request.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import csv
import json
import os
import random
import sys
import tempfile
import threading
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from chaos.load.driver import LoadConfig, LoadRun  # noqa: E402
from chaos.records import read_records  # noqa: E402
from chaos.load.shapes import replay  # noqa: E402
from chaos.load.workloads import WorkloadSpec  # noqa: E402

SERVER_ORDER_TOLERANCE_S = 0.05


class FastServer:
    """One token a request, streamed, keep-alive; keeps (arrival, log line) of each body. Own thread and loop."""

    def __init__(self):
        self.seen: list[tuple[float, int]] = []
        self.loop = asyncio.new_event_loop()
        self.port = None
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self):
        asyncio.set_event_loop(self.loop)
        srv = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=4096))
        self.port = srv.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                first, *rest = head.decode().split("\r\n")
                length = next((int(v) for k, _, v in (x.partition(":") for x in rest) if k.lower() == "content-length"), 0)
                body = await reader.readexactly(length)
                if "/models" in first:
                    data = json.dumps({"data": [{"id": "fast", "owned_by": "bench"}]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(data)).encode() + b"\r\n\r\n" + data)
                    continue
                self.seen.append((time.monotonic(), int(json.loads(body)["messages"][0]["content"].split()[1])))
                chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]})
                usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
                payload = f"data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


PAD = {"bytes": 0}  # --pad: each body's prompt this much longer, to measure memory on a large file


def _body(lineno: int, t: float, tokens: int) -> str:
    return json.dumps({"timestamp": t, "max_tokens": max(1, min(tokens, 4)),
                       "messages": [{"role": "user", "content": f"line {lineno} of the trace " + "x" * PAD["bytes"]}]})


def generated_log(path: str, n: int, seed: int = 1) -> None:
    """Bursty as the Azure trace is: bursts of up to 67 requests in a second after lulls of 3-11 s."""
    rng = random.Random(seed)
    t, lines = 1_700_000_000.0, []
    while len(lines) < n:
        for _ in range(rng.randint(10, 67)):
            lines.append(_body(len(lines) + 1, t + rng.random(), 8))
        t += 1 + rng.uniform(2, 10)
    lines = lines[:n]
    lines.sort(key=lambda s: json.loads(s)["timestamp"])
    with open(path, "w") as f:  # line numbers follow time order, so the body's line is its file line
        f.write("\n".join(_body(i + 1, json.loads(s)["timestamp"], 8) for i, s in enumerate(lines)) + "\n")


def azure_to_jsonl(csv_path: str, path: str, rows: int) -> None:
    with open(csv_path, newline="") as src, open(path, "w") as out:
        for i, row in enumerate(csv.DictReader(src)):
            if i >= rows:
                break
            stamp = row["TIMESTAMP"]
            head, _, frac = stamp.partition(".")
            t = datetime.fromisoformat(head).timestamp() + float("0." + (frac or "0"))  # 7 digits: too many for
            out.write(_body(i + 1, t, int(row["GeneratedTokens"])) + "\n")  # fromisoformat on older Pythons


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values)) - 1))] if values else float("nan")


def _server_order(seen, intended: dict[int, float]) -> int:
    bad, latest = 0, float("-inf")
    for _, line in sorted(seen):
        if intended[line] < latest - SERVER_ORDER_TOLERANCE_S:
            bad += 1
        latest = max(latest, intended[line])
    return bad


def run_chaos(log: str, n: int, speed: float, out: str) -> dict:
    srv = FastServer()
    plan = replay(3600.0, speed=speed, max_users=512, max_requests=n)
    cfg = LoadConfig(target=srv.url, plan=plan, workload=[(WorkloadSpec("replay", replay_file=log), 1.0)],
                     out_dir=out)
    run = LoadRun(cfg, progress=lambda line: None)
    run.start()
    peak, cpu = 0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 3600
    while run.poll() and time.monotonic() < deadline:
        try:
            with open(f"/proc/{run.main.pid}/status") as f:
                peak = max(peak, next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")))
            with open(f"/proc/{run.main.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except (OSError, StopIteration, IndexError, ValueError):
            pass
        time.sleep(0.2)
    run._reap(15.0)
    res = run.result()
    recs = read_records(res.records_path)
    t0 = min(r.t_sched for r in recs)
    intended = {r.source_line: r.t_sched - t0 for r in recs}
    lags = [r.t_start - r.t_sched for r in recs]
    counts = collections.Counter(line for _, line in srv.seen)
    acc = res.replay
    return {"name": "chaos load --replay-speed", "window": acc["window"], "sent": acc["sent"],
            "lost": acc["not_sent"], "server_distinct": len(counts), "dupes": sum(v - 1 for v in counts.values()),
            "order_client": acc["out_of_order"], "order_server": _server_order(srv.seen, intended),
            "p50": _pct(lags, 50), "p99": _pct(lags, 99), "max": max(lags), "rss_mb": peak / 1024,
            "cpu_ms": cpu * 1000 / max(1, acc["sent"])}


def run_asyncio(log: str, n: int, speed: float) -> dict:
    """The floor: asyncio tasks created at their time, sending with aiohttp (one pooled session)."""
    import aiohttp

    srv = FastServer()
    rows = []
    with open(log) as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            rows.append(json.loads(line))
    stamps = [r.pop("timestamp") for r in rows]
    lags: list[float] = []

    async def main():
        conn = aiohttp.TCPConnector(limit=512)
        async with aiohttp.ClientSession(connector=conn) as s:
            async def send(body, t_sched):
                lags.append(time.perf_counter() - t_sched)
                async with s.post(srv.url + "/v1/chat/completions", json={"model": "fast", **body,
                                                                          "stream": True}) as r:
                    await r.read()
            t0, base, tasks = time.perf_counter(), stamps[0], []
            for body, t in zip(rows, stamps):
                t_sched = t0 + (t - base) / speed
                await asyncio.sleep(max(0.0, t_sched - time.perf_counter()))
                tasks.append(asyncio.create_task(send(body, t_sched)))
            await asyncio.gather(*tasks)

    asyncio.run(main())
    intended = {i + 1: (t - stamps[0]) / speed for i, t in enumerate(stamps)}
    counts = collections.Counter(line for _, line in srv.seen)
    return {"name": "plain asyncio + aiohttp", "window": len(rows), "sent": len(lags), "lost": len(rows) - len(lags),
            "server_distinct": len(counts), "dupes": sum(v - 1 for v in counts.values()), "order_client": "-",
            "order_server": _server_order(srv.seen, intended), "p50": _pct(lags, 50), "p99": _pct(lags, 99),
            "max": max(lags), "rss_mb": float("nan"), "cpu_ms": float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", help="a JSONL replay file or an Azure trace CSV (default: a generated bursty log)")
    p.add_argument("--rows", type=int, default=2000, help="requests of the trace to replay (its window)")
    p.add_argument("--speed", type=float, default=10.0)
    p.add_argument("--no-asyncio", action="store_true", help="skip the plain asyncio replayer")
    p.add_argument("--pad", type=int, default=0, metavar="BYTES",
                   help="make each prompt BYTES longer (memory on a large log: the file is streamed, not held)")
    a = p.parse_args()
    PAD["bytes"] = a.pad
    work = tempfile.mkdtemp(prefix="replay-lag-")
    log = os.path.join(work, "trace.jsonl")
    if a.trace and a.trace.endswith(".csv"):
        azure_to_jsonl(a.trace, log, a.rows)
    elif a.trace:
        log = a.trace
    else:
        generated_log(log, a.rows)
    with open(log) as f:
        stamps = [json.loads(x)["timestamp"] for _, x in zip(range(a.rows), f)]
    per_s = collections.Counter(int(t) for t in stamps)
    print(f"log {os.path.getsize(log) / 1e6:.0f} MB; trace {a.trace or 'generated'}: {len(stamps)} requests over {stamps[-1] - stamps[0]:.0f} s, peak "
          f"{max(per_s.values())} in one second, mean {len(stamps) / max(1.0, stamps[-1] - stamps[0]):.2f}/s; "
          f"replayed at {a.speed:g}x ({max(per_s.values()) * a.speed:.0f}/s in the peak second)")
    rows = [run_chaos(log, a.rows, a.speed, os.path.join(work, "out"))]
    if not a.no_asyncio:
        rows.append(run_asyncio(log, a.rows, a.speed))
    head = (f"{'replayer':<28}{'window':>7}{'sent':>6}{'lost':>6}{'server':>8}{'dupes':>6}{'order c/s':>11}"
            f"{'lag p50 ms':>11}{'p99 ms':>8}{'max ms':>8}{'peak RSS MB':>13}{'CPU ms/req':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['name']:<28}{r['window']:>7}{r['sent']:>6}{r['lost']:>6}{r['server_distinct']:>8}{r['dupes']:>6}"
              f"{str(r['order_client']) + '/' + str(r['order_server']):>11}{r['p50'] * 1000:>11.1f}"
              f"{r['p99'] * 1000:>8.1f}{r['max'] * 1000:>8.1f}{r['rss_mb']:>13.0f}{r['cpu_ms']:>12.2f}")
    print(f"(server order: an arrival before one intended > {SERVER_ORDER_TOLERANCE_S * 1000:.0f} ms earlier; "
          f"files in {work})")


if __name__ == "__main__":
    main()
