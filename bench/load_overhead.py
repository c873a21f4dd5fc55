"""Load generator overhead: chaos.load's Locust user vs a plain asyncio client, same endpoint, same run.

What it measures
----------------
A local SSE endpoint (this file run with ``--serve``, a separate process, plain asyncio
Protocol, responses precomputed) answers ``GET /v1/models`` and streams every
``POST /v1/chat/completions`` as: response headers at once, then after a fixed first-token
delay (default 20 ms) a role chunk and N content chunks (default 16, zero inter-token delay
by default), a usage chunk and ``data: [DONE]``, each SSE event its own HTTP/1.1 chunk
(chunked transfer encoding, keep-alive). It also times itself: from the moment a request is
fully read to the moment its first token is written ("server TTFT"), and counts connections.

Two clients are driven against it, one after the other, never at the same time:

* locust  -- the real chaos.load path: ``LoadRun`` from chaos/load/driver.py (what ``run_load``
  uses) with ``workers=0`` (one Locust process), plan ``fixed(users, duration)``, workload
  ``chat`` (input 20-40 tokens, output N). Figures come from its requests.jsonl records;
  TTFT = t_first - t_start, as LLMUser records it.
* asyncio -- a vLLM-benchmark-style client (this file run with ``--client``, its own process):
  one aiohttp ClientSession, ``users`` coroutines each sending requests back to back for the
  same duration, the same request bodies (chaos.load.workloads.Workload, same seed, same
  indices, same model/stream/stream_options fields), parsing the stream line by line like
  vLLM's benchmark_serving (strip, drop "data: ", json.loads). TTFT = first non-empty content
  minus send time (vLLM counts the first chunk even if empty; here the role chunk and the first
  token arrive together, so it makes no difference).

Phases (each alternating the clients A B B A in default mode, A B in --quick):

1. TTFT at a moderate load (default 8 users): neither client nor the endpoint is near
   saturation, so the TTFT difference is the client's own per-request latency overhead.
   Aim: |P50(locust) - P50(asyncio)| <= 1 ms.
2. Capacity at a high load (default 128 users): streamed requests/s and output tokens/s.
   With a 20 ms first token, 64 users cap either client near 64 / 0.021 s = ~3,000 req/s,
   about where both run out of CPU on this box; 128 users make sure both are CPU-bound.
   Both clients are single-process and single-threaded, so each can use at most one core;
   the endpoint uses a small part of the other. Compared: requests/s per client core =
   requests/s divided by the client process's CPU seconds per wall second over the same
   window (psutil on its PID), i.e. throughput at equal CPU; raw requests/s is shown too.
   Aim: locust >= 80 % of asyncio.
3. Side check: the same TTFT run with the endpoint writing the chunked-encoding terminator
   (``0\r\n\r\n``) 2 ms after ``data: [DONE]`` instead of in the same write. uvicorn writes
   it separately, and over a network it can arrive in a later segment. Reported: TCP
   connections the endpoint accepted per client (keep-alive working = about one per user).

All rates, percentiles and CPU figures are taken over a steady window of each run
(first request + warm-up ... planned end - 1 s), requests counted by their end time.
The CPU columns are in cores (CPU seconds / wall second): client, endpoint, and "other" =
machine-wide busy CPU minus client, endpoint and this orchestrator -- anything else running
on the box (e.g. tests). A run with "other" well above ~0.05 was disturbed.

TTFT against the reference server's own timing, with aiohttp, httpx and GuideLLM beside chaos load, is
bench/ttft_truth.py.

Usage: python bench/load_overhead.py [--quick] [--ttft-users 8] [--cap-users 128] [--tokens 16] [--ttft-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _table import fmt, print_table

HERE = os.path.abspath(__file__)


# ============================================================================================
# 1. The endpoint (runs in its own process: --serve)
# ============================================================================================

def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return _chunk(b"data: " + data.encode() + b"\n\n")


def build_stream(model: str, tokens: int) -> tuple[bytes, list[bytes], bytes]:
    """(first part: role + first token, the other token chunks, tail: usage + [DONE]) as HTTP chunks."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": model}

    def choice(delta, finish=None):
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    toks = [_sse(choice({"content": " tok"}, "length" if i == tokens - 1 else None)) for i in range(tokens)]
    first = _sse(choice({"role": "assistant", "content": ""})) + toks[0]
    usage = {**base, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": tokens,
                                              "total_tokens": 30 + tokens}}
    tail = _sse(usage) + _sse("[DONE]")
    return first, toks[1:], tail


END = b"0\r\n\r\n"
SPLIT_MS = 2.0  # side check: the chunked terminator this long after [DONE], as when it comes in its own TCP segment
SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n")


def _plain(status: str, body: bytes, ctype=b"application/json") -> bytes:
    return (b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (status.encode(), ctype, len(body))
            + body)


def serve(port: int, ttft_s: float, itl_s: float, tokens: int, model: str = "m") -> None:
    import asyncio
    import gc

    gc.freeze()
    loop = asyncio.new_event_loop()
    first, rest, tail = build_stream(model, tokens)
    whole = first + b"".join(rest) + tail
    models = _plain("200 OK", json.dumps({"object": "list", "data": [{"id": model, "object": "model",
                                                                      "owned_by": "bench"}]}).encode())
    not_found = _plain("404 Not Found", b'{"error":{"message":"not found","code":"not_found"}}')
    ok = _plain("200 OK", b"{}")
    st = {"conns": 0, "requests": 0, "ttft": [], "split_end": False}
    perf = time.perf_counter

    class Conn(asyncio.Protocol):
        __slots__ = ("tr", "buf", "closed")

        def connection_made(self, tr):
            self.tr, self.buf, self.closed = tr, bytearray(), False
            st["conns"] += 1

        def connection_lost(self, exc):
            self.closed = True

        def data_received(self, data):
            self.buf += data
            while True:
                buf = self.buf
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    return
                head = bytes(buf[:i])
                cl = 0
                j = head.lower().find(b"\r\ncontent-length:")
                if j >= 0:
                    k = head.find(b"\r\n", j + 2)
                    cl = int(head[j + 17:k if k >= 0 else len(head)])
                end = i + 4 + cl
                if len(buf) < end:
                    return
                nl = head.find(b"\r\n")
                method, path = head[:nl if nl >= 0 else len(head)].split(b" ")[:2]
                del buf[:end]
                self.handle(method, path)

        def handle(self, method, path):
            tr = self.tr
            if method == b"POST" and path.endswith(b"/chat/completions"):
                st["requests"] += 1
                t_recv = perf()
                tr.write(SSE_HEAD)
                if itl_s <= 0:
                    loop.call_later(ttft_s, self.send_all, t_recv)
                else:
                    loop.call_later(ttft_s, self.send_step, t_recv, 0)
            elif path.endswith(b"/models"):
                tr.write(models)
            elif path == b"/stats":
                tr.write(_plain("200 OK", json.dumps({k: st[k] for k in ("conns", "requests", "ttft")}).encode()))
            elif path == b"/stats/reset":
                st["conns"], st["requests"], st["ttft"] = 0, 0, []
                tr.write(ok)
            elif path.startswith(b"/control/split_end/"):  # off | ms to wait before the terminator
                v = path.rsplit(b"/", 1)[1]
                st["split_end"] = False if v == b"off" else float(v) / 1000
                tr.write(ok)
            else:
                tr.write(not_found)

        def send_all(self, t_recv):
            if self.closed:
                return
            if st["split_end"] is not False:  # as uvicorn/Starlette do: the last empty body part is its own write
                self.tr.write(whole)
                if st["split_end"] > 0:
                    loop.call_later(st["split_end"], self.send_end)
                else:
                    loop.call_soon(self.send_end)
            else:
                self.tr.write(whole + END)
            st["ttft"].append(perf() - t_recv)

        def send_end(self):
            if not self.closed:
                self.tr.write(END)

        def send_step(self, t_recv, k):
            if self.closed:
                return
            if k == 0:
                self.tr.write(first)
                st["ttft"].append(perf() - t_recv)
            elif k <= len(rest):
                self.tr.write(rest[k - 1])
            else:
                self.tr.write(tail + END)
                return
            loop.call_later(itl_s, self.send_step, t_recv, k + 1)

    async def main():
        srv = await loop.create_server(Conn, "127.0.0.1", port, backlog=1024, reuse_address=True)
        print(f"endpoint listening on 127.0.0.1:{port}", flush=True)
        await srv.serve_forever()

    loop.run_until_complete(main())


# ============================================================================================
# 2. The plain asyncio client (runs in its own process: --client)
# ============================================================================================

def client(url: str, model: str, users: int, duration: float, seed: int, input_tokens: str, output_tokens: str,
           out: str) -> None:
    import asyncio
    import itertools

    import aiohttp

    from chaos.load.workloads import Workload, WorkloadSpec

    wl = Workload([(WorkloadSpec("chat", input_tokens=input_tokens, output_tokens=output_tokens), 1.0)],
                  seed=seed, tokenizer="estimate")  # what discover() picks for owned_by != llm-chaos
    api = url.rstrip("/") + "/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    recs: list = []
    counter = itertools.count()

    async def one(session, payload):
        # the request function of vLLM's benchmark_serving (async_request_openai_chat_completions), minus
        # its per-request ClientSession: ITL list and generated text kept as it keeps them
        st = time.time()
        t_first = None
        tokens = 0
        ok = False
        err = None
        itl: list[float] = []
        generated_text = ""
        most_recent = time.perf_counter()
        try:
            async with session.post(api, json=payload, headers=headers) as resp:
                if resp.status == 200:
                    async for chunk_bytes in resp.content:
                        chunk_bytes = chunk_bytes.strip()
                        if not chunk_bytes:
                            continue
                        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                        if chunk == "[DONE]":
                            ok = True
                            continue
                        timestamp = time.perf_counter()
                        data = json.loads(chunk)
                        if choices := data.get("choices"):
                            content = choices[0]["delta"].get("content")
                            if content and t_first is None:
                                t_first = time.time()
                            elif t_first is not None:
                                itl.append(timestamp - most_recent)
                            generated_text += content or ""
                        elif usage := data.get("usage"):
                            tokens = usage.get("completion_tokens") or 0
                        most_recent = timestamp
                else:
                    err = f"HTTP {resp.status}"
        except Exception as e:  # noqa: BLE001 -- counted, not fatal
            err = f"{type(e).__name__}: {e}"
        recs.append((st, t_first, time.time(), tokens, ok and err is None))

    async def main():
        connector = aiohttp.TCPConnector(limit=users, force_close=False)
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            t_stop = time.time() + duration

            async def worker():
                while time.time() < t_stop:
                    req = wl.request(next(counter))
                    payload = {"model": model, **req.body, "stream": True, "stream_options": {"include_usage": True}}
                    await one(session, payload)

            await asyncio.gather(*(worker() for _ in range(users)))

    asyncio.run(main())
    with open(out, "w") as f:
        json.dump(recs, f)


# ============================================================================================
# 3. The orchestrator
# ============================================================================================

class Sampler:
    """CPU seconds (user+system) of named processes and machine-wide busy CPU, sampled over time."""

    def __init__(self, procs: dict, interval: float = 0.2):
        import psutil

        self.psutil = psutil
        self.procs = {k: psutil.Process(pid) for k, pid in procs.items()}
        self.interval = interval
        self.samples: list[tuple[float, dict]] = []
        self.last: dict = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str, pid: int) -> None:
        self.procs[name] = self.psutil.Process(pid)

    def sample(self) -> None:
        row = {}
        for name, p in list(self.procs.items()):
            try:
                c = p.cpu_times()
                row[name] = c.user + c.system
                self.last[name] = row[name]
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                row[name] = self.last.get(name)
        s = self.psutil.cpu_times()
        row["_busy"] = sum(s) - s.idle - getattr(s, "iowait", 0.0)
        self.samples.append((time.time(), row))

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        self.sample()

    def at(self, name: str, t: float) -> float | None:
        pts = [(ts, row.get(name)) for ts, row in self.samples if row.get(name) is not None]
        if not pts:
            return None
        if t <= pts[0][0]:
            return pts[0][1]
        for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
            if t0 <= t <= t1:
                return v0 + (v1 - v0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return pts[-1][1]

    def cores(self, name: str, t0: float, t1: float) -> float | None:
        a, b = self.at(name, t0), self.at(name, t1)
        return None if a is None or b is None else (b - a) / (t1 - t0)


def pctl(xs: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in 0..100."""
    if not xs:
        return None
    xs = sorted(xs)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def http(port: int, path: str, method: str = "GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def analyse(name, rep, recs, sampler, t0, duration, warm, server_stats, users, extra=None) -> dict:
    """recs: (t_start, t_first, t_end, tokens, ok). Steady window [t0 + warm, t0 + duration - 1]."""
    w0, w1 = t0 + warm, t0 + duration - 1.0
    span = w1 - w0
    done = [r for r in recs if w0 <= r[2] < w1]
    ok = [r for r in done if r[4]]
    started = [r for r in recs if w0 <= r[0] < w1 and r[4] and r[1] is not None]
    ttft = [(r[1] - r[0]) * 1000 for r in started]
    cli = sampler.cores("client", w0, w1)
    srv = sampler.cores("server", w0, w1)
    me = sampler.cores("me", w0, w1) or 0.0
    busy = sampler.cores("_busy", w0, w1)
    other = None if None in (busy, cli, srv) else busy - cli - srv - me
    s_ttft = [x * 1000 for x in server_stats["ttft"]]
    return {
        "client": name, "rep": rep, "users": users, "window_s": span, "sent": len(recs),
        "errors": sum(1 for r in recs if not r[4]), "done": len(ok),
        "rps": len(ok) / span, "tps": sum(r[3] for r in ok) / span,
        "ttft_p50": pctl(ttft, 50), "ttft_p99": pctl(ttft, 99), "ttft": ttft,
        "srv_ttft_p50": pctl(s_ttft, 50), "srv_ttft_p99": pctl(s_ttft, 99),
        "cli_cores": cli, "srv_cores": srv, "other_cores": other,
        "rps_per_core": (len(ok) / span / cli) if cli else None,
        "conns": server_stats["conns"], **(extra or {}),
    }


def run_locust(port, users, duration, tokens, seed, out_dir, sampler, warm, rep) -> dict:
    from chaos.load.driver import LoadConfig, LoadRun
    from chaos.records import read_records
    from chaos.load.shapes import fixed
    from chaos.load.workloads import WorkloadSpec

    http(port, "/stats/reset", "POST")
    cfg = LoadConfig(target=f"http://127.0.0.1:{port}", plan=fixed(users, duration),
                     workload=[(WorkloadSpec("chat", input_tokens="20-40", output_tokens=str(tokens)), 1.0)],
                     out_dir=out_dir, seed=seed, workers=0)
    run = LoadRun(cfg, progress=lambda s: None)
    try:  # what run_load does, with CPU sampling while Locust runs
        run.start()
        sampler.add("client", run.main.pid)
        while run.poll():
            time.sleep(0.2)
        run.wait(0)
    finally:
        if run.procs and any(p.poll() is None for p in run.procs):
            run.stop()
    res = run.result()
    recs_raw = read_records(run.records_path)
    recs = [(r.t_start, r.t_first, r.t_end, r.output_tokens, r.outcome == "ok") for r in recs_raw
            if r.outcome != "cancelled" and r.t_end is not None]
    stats = http(port, "/stats")
    t0 = min(r[0] for r in recs)
    outcomes = {}
    for r in recs_raw:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    return analyse("locust", rep, recs, sampler, t0, duration, warm, stats, users,
                   {"outcomes": outcomes, "locust_rc": res.locust_rc, "notes": res.notes})


def run_asyncio(port, users, duration, tokens, seed, out_dir, sampler, warm, rep) -> dict:
    http(port, "/stats/reset", "POST")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "asyncio-records.json")
    cmd = [sys.executable, HERE, "--client", "--url", f"http://127.0.0.1:{port}", "--model", "m",
           "--users", str(users), "--duration", str(duration), "--seed", str(seed), "--input-tokens", "20-40",
           "--output-tokens", str(tokens), "--out", out]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        sampler.add("client", p.pid)
        p.wait(duration + 120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with open(out) as f:
        recs = [tuple(r) for r in json.load(f)]
    stats = http(port, "/stats")
    t0 = min(r[0] for r in recs)
    return analyse("asyncio", rep, recs, sampler, t0, duration, warm, stats, users)


def wait_quiet(max_wait: float, limit: float = 0.15, need: int = 3) -> float:
    """Wait (at most max_wait s) for `need` consecutive 1-s windows with < `limit` cores busy machine-wide.

    Returns the seconds waited. Between runs only the idle endpoint and this process are ours.
    """
    import psutil

    if max_wait <= 0:
        return 0.0
    t0 = time.time()
    quiet = 0

    def busy():
        c = psutil.cpu_times()
        return sum(c) - c.idle - getattr(c, "iowait", 0.0)

    prev, tp = busy(), time.time()
    while quiet < need and time.time() - t0 < max_wait:
        time.sleep(1.0)
        cur, tc = busy(), time.time()
        quiet = quiet + 1 if (cur - prev) / (tc - tp) < limit else 0
        prev, tp = cur, tc
    return time.time() - t0


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke-test size: one run per client per phase (~40 s)")
    p.add_argument("--ttft-users", type=int, default=8, help="users for the TTFT phase (default 8)")
    p.add_argument("--cap-users", type=int, default=128,
                   help="users for the capacity phase (default 128: with a 20 ms first token, 64 users cap either "
                        "client near 64/0.021 = ~3,000 req/s before it runs out of CPU)")
    p.add_argument("--ttft-duration", type=float, help="seconds per TTFT run (default 12, quick 5)")
    p.add_argument("--cap-duration", type=float, help="seconds per capacity run (default 15, quick 6)")
    p.add_argument("--tokens", type=int, default=16, help="content chunks (output tokens) per response")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="endpoint's first-token delay")
    p.add_argument("--itl-ms", type=float, default=0.0, help="endpoint's inter-token delay (0: all at once)")
    p.add_argument("--no-split-check", action="store_true",
                   help="skip the side check with the chunked terminator sent 2 ms after [DONE]")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                   help="before each run wait up to S seconds for 3 s with < 0.15 cores busy on the machine "
                        "(a shared box: other processes distort both clients' figures); default 0, no waiting")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="endpoint port (default: a free one)")
    p.add_argument("--keep", help="keep run folders (records, Locust logs) here instead of a temp dir")
    # internal modes
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--model", default="m", help=argparse.SUPPRESS)
    p.add_argument("--users", type=int, help=argparse.SUPPRESS)
    p.add_argument("--duration", type=float, help=argparse.SUPPRESS)
    p.add_argument("--input-tokens", default="20-40", help=argparse.SUPPRESS)
    p.add_argument("--output-tokens", default="16", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.serve:
        serve(a.port, a.ttft_ms / 1000, a.itl_ms / 1000, a.tokens, a.model)
        return 0
    if a.client:
        client(a.url, a.model, a.users, a.duration, a.seed, a.input_tokens, a.output_tokens, a.out)
        return 0

    from importlib.metadata import version  # not `import locust`: that monkey-patches this process with gevent

    from chaos.load.driver import _free_port

    ttft_d = a.ttft_duration or (5.0 if a.quick else 12.0)
    cap_d = a.cap_duration or (6.0 if a.quick else 15.0)
    warm = 1.0 if a.quick else 2.0
    split_d = 5.0 if a.quick else 6.0
    port = a.port or _free_port()
    work = a.keep or tempfile.mkdtemp(prefix="load-overhead-")
    os.makedirs(work, exist_ok=True)
    t_begin = time.time()

    print("== Load generator overhead: chaos.load Locust user vs plain asyncio client ==")
    print(f"host: {platform.node()}  cpus: {os.cpu_count()}  python {platform.python_version()}  "
          f"locust {version('locust')}  aiohttp {version('aiohttp')}")
    print(f"endpoint: first token after {a.ttft_ms:g} ms, {a.tokens} content chunks, inter-token delay "
          f"{a.itl_ms:g} ms, chunked SSE over HTTP/1.1 keep-alive, one asyncio process")
    print(f"workload: chat, input 20-40 tokens (estimate), max_tokens {a.tokens}, seed {a.seed}; "
          f"TTFT phase {a.ttft_users} users x {ttft_d:g} s, capacity phase {a.cap_users} users x {cap_d:g} s; "
          f"steady window = first request + {warm:g} s .. planned end - 1 s")
    print(f"mode: {'quick' if a.quick else 'default'}  wait-quiet {a.wait_quiet:g} s  load average at start: "
          f"{loadavg()}  run folders: {work}")
    print(flush=True)

    srv = subprocess.Popen([sys.executable, HERE, "--serve", "--port", str(port), "--ttft-ms", str(a.ttft_ms),
                            "--itl-ms", str(a.itl_ms), "--tokens", str(a.tokens)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    results = []
    try:
        deadline = time.time() + 20
        while True:
            try:
                http(port, "/v1/models")
                break
            except OSError:
                if srv.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the endpoint did not start")
                time.sleep(0.1)

        def one(kind, users, duration, phase, rep, tag=""):
            waited = wait_quiet(a.wait_quiet)
            if waited > 3.5:
                print(f"  (waited {waited:.0f} s for the machine to be quiet)", flush=True)
            sampler = Sampler({"server": srv.pid, "me": os.getpid()}).start()
            try:
                d = os.path.join(work, f"{phase}-{kind}-{rep}{tag}")
                fn = run_locust if kind == "locust" else run_asyncio
                r = fn(port, users, duration, a.tokens, a.seed, d, sampler, warm, rep)
            finally:
                sampler.stop()
            r["phase"] = phase + tag
            results.append(r)
            print(f"  {phase + tag:<9} {kind:<8} rep {rep}: {r['rps']:8.1f} req/s  TTFT P50 {fmt(r['ttft_p50'])} ms  "
                  f"client {fmt(r['cli_cores'])} cores  endpoint {fmt(r['srv_cores'])} cores  "
                  f"other {fmt(r['other_cores'])}  errors {r['errors']}", flush=True)
            return r

        order = ["locust", "asyncio"] if a.quick else ["locust", "asyncio", "asyncio", "locust"]
        reps = {"locust": 0, "asyncio": 0}
        print("runs (progress):")
        for kind in order:
            reps[kind] += 1
            one(kind, a.ttft_users, ttft_d, "ttft", reps[kind])
        reps = {"locust": 0, "asyncio": 0}
        for kind in (order if a.quick else ["asyncio", "locust", "locust", "asyncio"]):
            reps[kind] += 1
            one(kind, a.cap_users, cap_d, "capacity", reps[kind])
        split = None
        if not a.no_split_check:
            http(port, f"/control/split_end/{SPLIT_MS:g}", "POST")
            split = [one(k, a.ttft_users, split_d, "ttft", 1, "+split")
                     for k in ("locust", "asyncio")]
            http(port, "/control/split_end/off", "POST")
    finally:
        srv.kill()  # by PID: the endpoint is our own child
        srv.wait()
    print()

    # -------------------------------------------------------------------- tables
    cols = ["phase", "client", "rep", "users", "ok req", "errors", "req/s", "out tok/s", "TTFT P50 ms",
            "TTFT P99 ms", "server TTFT P50", "client cores", "endpoint cores", "other cores", "req/s per client core",
            "conns"]
    print("per run (steady window; cores = CPU s / wall s; server TTFT = endpoint's own request-read -> first write)")
    print_table(cols, [[r["phase"], r["client"], r["rep"], r["users"], r["done"], r["errors"], r["rps"], r["tps"],
                        r["ttft_p50"], r["ttft_p99"], r["srv_ttft_p50"], r["cli_cores"], r["srv_cores"],
                        r["other_cores"], r["rps_per_core"], r["conns"]] for r in results],
                "lllrrrrrrrrrrrrr")
    print()

    def pooled(phase, kind):
        rs = [r for r in results if r["phase"] == phase and r["client"] == kind]
        ttft = [x for r in rs for x in r["ttft"]]
        return rs, ttft

    lr, lt = pooled("ttft", "locust")
    ar, at = pooled("ttft", "asyncio")
    lp50, lp99, ap50, ap99 = pctl(lt, 50), pctl(lt, 99), pctl(at, 50), pctl(at, 99)
    ls50 = statistics.median(r["srv_ttft_p50"] for r in lr)
    as50 = statistics.median(r["srv_ttft_p50"] for r in ar)
    print(f"TTFT at {a.ttft_users} users (all runs of each client pooled: locust {len(lt)}, asyncio {len(at)} requests)")
    print_table(["TTFT ms", "locust (LLMUser)", "asyncio client", "locust - asyncio"],
                [["P50", lp50, ap50, f"{lp50 - ap50:+.2f}"], ["P99", lp99, ap99, f"{lp99 - ap99:+.2f}"],
                 ["server-side P50", ls50, as50, f"{ls50 - as50:+.2f}"],
                 ["P50 - server-side P50", lp50 - ls50, ap50 - as50, f"{(lp50 - ls50) - (ap50 - as50):+.2f}"]])
    print()

    cl = [r for r in results if r["phase"] == "capacity" and r["client"] == "locust"]
    ca = [r for r in results if r["phase"] == "capacity" and r["client"] == "asyncio"]

    def med(rs, k):
        vals = [r[k] for r in rs if r[k] is not None]
        return statistics.median(vals) if vals else None

    rows = []
    for label, k in (("req/s", "rps"), ("out tok/s", "tps"), ("client cores", "cli_cores"),
                     ("req/s per client core", "rps_per_core"), ("endpoint cores", "srv_cores"),
                     ("other cores", "other_cores"), ("TTFT P50 ms", "ttft_p50"), ("TTFT P99 ms", "ttft_p99")):
        lv, av = med(cl, k), med(ca, k)
        ratio = f"{lv / av:.2f}x" if lv is not None and av else "-"
        rows.append([label, lv, av, ratio])
    print(f"capacity at {a.cap_users} users (median of {len(cl)} run(s) each)")
    print_table(["", "locust (LLMUser)", "asyncio client", "locust / asyncio"], rows)
    print()

    d50 = lp50 - ap50
    per_core = med(cl, "rps_per_core") / med(ca, "rps_per_core")
    raw = med(cl, "rps") / med(ca, "rps")
    print(f"aim |TTFT P50 difference| <= 1 ms: {'MET' if abs(d50) <= 1.0 else 'MISSED'} "
          f"(locust {lp50:.2f} ms vs asyncio {ap50:.2f} ms: {d50:+.2f} ms; P99 {lp99 - ap99:+.2f} ms)")
    print(f"aim locust >= 80 % of asyncio req/s per client core: {'MET' if per_core >= 0.8 else 'MISSED'} "
          f"({per_core * 100:.0f} %: {med(cl, 'rps_per_core'):.0f} vs {med(ca, 'rps_per_core'):.0f} req/s per core; "
          f"raw req/s {raw * 100:.0f} %)")
    if split:
        sl, sa = split
        print(f"side check (ttft+split rows), chunked terminator written {SPLIT_MS:g} ms after [DONE] (uvicorn writes "
              f"it separately; over a network it can come in a later segment): TCP connections opened in "
              f"{split_d:g} s at {a.ttft_users} users: locust {sl['conns']} for {sl['sent']} requests, asyncio "
              f"{sa['conns']} for {sa['sent']} requests; TTFT P50 locust {sl['ttft_p50']:.2f} ms, "
              f"asyncio {sa['ttft_p50']:.2f} ms")
    bad = [r for r in results if r["other_cores"] is not None and r["other_cores"] > 0.1]
    if bad:
        print(f"note: {len(bad)} run(s) saw > 0.1 cores of other load on the machine: "
              + ", ".join(f"{r['phase']}/{r['client']}#{r['rep']} ({r['other_cores']:.2f})" for r in bad))
    odd = [r for r in results if r["errors"]]
    if odd:
        print("note: runs with errors: " + ", ".join(f"{r['phase']}/{r['client']}#{r['rep']} {r.get('outcomes', r['errors'])}"
                                                     for r in odd))
    print(f"load average at end: {loadavg()}  total wall time {time.time() - t_begin:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
