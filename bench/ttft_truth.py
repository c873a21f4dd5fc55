"""TTFT truth: chaos load, a plain aiohttp client, a plain httpx client and GuideLLM against the reference
server's own timing, at 1 and 50 streams, in one run (BENCHMARKS.md section 4).

The reference server (chaos reference serve, its own process) is driven in turn by chaos load (LoadRun, one
Locust process), a plain aiohttp client, a plain httpx client and GuideLLM, with the same request bodies, at
1 stream and at 50. Each client's TTFT is its first non-empty content minus its send time; the server's own
is chaos_timing.first_token - chaos_timing.arrival from the chunk that carries the finish_reason (handler
start, before the body is read, to just before the first chunk with text is written). Per request:
client - server, leaving out each run's first --truth-warmup requests. GuideLLM keeps no response bodies, so
for it (and, as a cross-check, for every client) the server side is the mean of vllm:time_to_first_token_seconds
over the run (sum and count deltas of /metrics, read before and after the run): those deltas cover every
request of the run, so the client mean it is compared with covers every request too, warm-up included (the
histogram cannot leave the first requests out). The histogram counts the first token (a token held back as
partial UTF-8 included), the clients the first text.

Usage: python bench/ttft_truth.py [--quick] [--guidellm PATH] [--httpx-python PYTHON] [--reps 2]
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
import time
import urllib.request

from _table import fmt, print_table
from load_overhead import loadavg, pctl, wait_quiet

HERE = os.path.abspath(__file__)

TTFT_METRIC = "vllm:time_to_first_token_seconds"


def truth_client(kind: str, url: str, bodies_path: str, users: int, n: int, out: str) -> None:
    """A plain client (aiohttp or httpx; no chaos import: httpx may run from another venv): n requests from
    bodies_path over `users` concurrent streams. Writes [[client_ttft_s, server_ttft_s | null], ...]."""
    import asyncio

    with open(bodies_path) as f:
        bodies = [json.dumps(b).encode() for b in json.load(f)]
    api = url.rstrip("/") + "/v1/chat/completions"
    headers = {"Content-Type": "application/json"}
    perf = time.perf_counter
    recs: list = []
    todo = iter(range(n))

    def handle(line, st) -> bool:
        """One SSE line; True once [DONE] came."""
        line = line.strip()
        if not line.startswith(b"data: "):
            return False
        data = line[6:]
        if data == b"[DONE]":
            return True
        obj = json.loads(data)
        for c in obj.get("choices") or []:
            if (c.get("delta") or {}).get("content") and st["first"] is None:
                st["first"] = st["t"]
        if isinstance(obj.get("chaos_timing"), dict):
            st["timing"] = obj["chaos_timing"]
        return False

    def done(st, t0):
        tm = st["timing"] or {}
        srv = (tm["first_token"] - tm["arrival"]) if tm.get("first_token") is not None and "arrival" in tm else None
        if st["first"] is not None:
            recs.append([st["first"] - t0, srv])

    async def run_aiohttp():
        import aiohttp

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=users)) as session:
            async def worker():
                for i in todo:
                    st = {"first": None, "timing": None, "t": 0.0}
                    t0 = perf()
                    async with session.post(api, data=bodies[i % len(bodies)], headers=headers) as resp:
                        async for line in resp.content:
                            st["t"] = perf()
                            if handle(line, st):
                                break
                    done(st, t0)
            await asyncio.gather(*(worker() for _ in range(users)))

    async def run_httpx():
        import httpx

        limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            async def worker():
                for i in todo:
                    st = {"first": None, "timing": None, "t": 0.0}
                    t0 = perf()
                    async with client.stream("POST", api, content=bodies[i % len(bodies)], headers=headers) as resp:
                        async for line in resp.aiter_lines():
                            st["t"] = perf()
                            if handle(line.encode(), st):
                                break
                    done(st, t0)
            await asyncio.gather(*(worker() for _ in range(users)))

    asyncio.run(run_aiohttp() if kind == "aiohttp" else run_httpx())
    with open(out, "w") as f:
        json.dump(recs, f)


def _histogram(base: str) -> tuple[float, float]:
    """(sum, count) of the server's TTFT histogram, over every label set."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(TTFT_METRIC + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(TTFT_METRIC + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def _truth_chaos(base, spec, users, n, work) -> list:
    from chaos.load.driver import LoadConfig, LoadRun
    from chaos.records import read_records
    from chaos.load.shapes import fixed

    cfg = LoadConfig(target=base, plan=fixed(users, 600.0, max_requests=n), workload=[(spec, 1.0)], out_dir=work)
    run = LoadRun(cfg, progress=lambda s: None)
    try:
        run.start()
        run.wait(0)
    finally:
        if run.procs and any(p.poll() is None for p in run.procs):
            run.stop()
    return [[r.ttft, r.server_ttft] for r in read_records(run.records_path) if r.outcome == "ok" and r.ttft is not None]


def _truth_guidellm(exe, base, prompts_path, users, n, tokens, work) -> list:
    out = os.path.join(work, "guidellm.json")
    profile = "kind=synchronous" if users == 1 else f"kind=concurrent,streams={users}"
    cmd = [exe, "run", "--backend", f"kind=openai_http,target={base}", "--profile", profile,
           "--constraint", f"kind=max_requests,count={n}", "--data", f"kind=json_file,path={prompts_path}",
           "--output", f"kind=json,path={out}", "--disable-console"]
    with open(os.path.join(work, "guidellm.log"), "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=600, check=True)
    with open(out) as f:
        reqs = json.load(f)["benchmarks"][0]["requests"]["successful"]
    return [[r["time_to_first_token_ms"] / 1000, None] for r in reqs if r.get("time_to_first_token_ms") is not None]


def _children_cpu() -> float:
    """CPU seconds of every child process that has ended: each client runs as one (or, GuideLLM, several)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _busy() -> float:
    import psutil

    c = psutil.cpu_times()
    return sum(c) - c.idle - getattr(c, "iowait", 0.0)


def truth(a) -> int:
    """TTFT of four clients against the reference server's own, at 1 and 50 streams, in one run."""
    import shutil
    from importlib.metadata import version

    from chaos.load.workloads import Workload, WorkloadSpec
    from chaos.reference.launcher import start_server

    work = a.keep or tempfile.mkdtemp(prefix="ttft-truth-")
    os.makedirs(work, exist_ok=True)
    spec = WorkloadSpec("chat", input_tokens=a.input, output_tokens=a.tokens)
    n_bodies = max(a.requests)
    bodies = [Workload([(spec, 1.0)], seed=0).request(i).body for i in range(n_bodies)]
    for b in bodies:
        b.update(model="chaos-reference", stream=True, stream_options={"include_usage": True})
    bodies_path = os.path.join(work, "bodies.json")
    with open(bodies_path, "w") as f:
        json.dump(bodies, f)
    prompts_path = os.path.join(work, "prompts.jsonl")
    with open(prompts_path, "w") as f:
        for b in bodies:
            f.write(json.dumps({"prompt": b["messages"][0]["content"], "output_tokens_count": a.tokens}) + "\n")
    guidellm = a.guidellm or shutil.which("guidellm")
    httpx_py = a.httpx_python or sys.executable
    print("== TTFT truth: chaos load, aiohttp, httpx and GuideLLM against the reference server's chaos_timing ==")
    print(f"host: {platform.node()}  cpus: {os.cpu_count()}  python {platform.python_version()}  locust {version('locust')}"
          f"  aiohttp {version('aiohttp')}  httpx from {httpx_py}  guidellm: {guidellm or 'not found (pass --guidellm)'}")
    print(f"server: chaos reference serve --preset {a.preset}; workload chat, {a.input} input tokens, "
          f"{a.tokens} output (ignore_eos), temperature 0; requests per run: "
          + ", ".join(f"{u} stream(s) {n}" for u, n in zip(a.streams, a.requests))
          + f"; first {a.warmup} of each run dropped; load average {loadavg()}", flush=True)
    rows, pooled, mismatched = [], {}, []
    with start_server(["--preset", a.preset, "--max-waiting", "1000"]) as srv:
        base = srv.base_url.split()[0]
        for b in bodies[:5]:  # warm-up: first requests pay for lazy initialisation
            urllib.request.urlopen(urllib.request.Request(base + "/v1/chat/completions", json.dumps(b).encode(),
                                                          {"Content-Type": "application/json"}), timeout=60).read()
        runs = [(users, n, rep, kind) for users, n in zip(a.streams, a.requests)
                for rep in range(1, a.reps + 1)
                for kind in (a.clients if rep % 2 else a.clients[::-1])]  # A B C D, then D C B A
        for users, n, rep, kind in runs:
            if kind == "guidellm" and not guidellm:
                print(f"  {kind:<10} {users:>3} streams: skipped, GuideLLM not found (pass --guidellm)", flush=True)
                continue
            d = os.path.join(work, f"{kind.replace(' ', '-')}-{users}-{rep}")
            os.makedirs(d, exist_ok=True)
            waited = wait_quiet(a.wait_quiet)
            if waited > 3.5:
                print(f"  (waited {waited:.0f} s for the machine to be quiet)", flush=True)
            busy0, h0, t0, cpu0 = _busy(), _histogram(base), time.time(), _children_cpu()
            try:
                if kind == "chaos load":
                    recs = _truth_chaos(base, spec, users, n, d)
                elif kind == "guidellm":
                    recs = _truth_guidellm(guidellm, base, prompts_path, users, n, a.tokens, d)
                else:
                    out = os.path.join(d, "records.json")
                    subprocess.run([httpx_py if kind == "httpx" else sys.executable, HERE, "--truth-client", kind,
                                    "--url", base, "--bodies", bodies_path, "--users", str(users), "--n", str(n),
                                    "--out", out], check=True, timeout=600, stdin=subprocess.DEVNULL)
                    with open(out) as f:
                        recs = json.load(f)
            except (subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
                print(f"  {kind:<10} {users:>3} streams: failed: {e}", flush=True)
                continue
            h1, busy = _histogram(base), (_busy() - busy0) / max(1e-9, time.time() - t0)
            cpu_ms = (_children_cpu() - cpu0) / max(1, len(recs)) * 1000  # the client's CPU per request
            hist_n = round(h1[1] - h0[1])
            hist_mean = (h1[0] - h0[0]) / hist_n * 1000 if hist_n > 0 else None
            if hist_n != len(recs):
                mismatched.append(f"{kind} {users} streams rep {rep}: histogram {hist_n}, client {len(recs)}")
            kept = recs[a.warmup:] if len(recs) > 2 * a.warmup else recs
            pooled.setdefault((kind, users), []).extend(kept)
            cli = [r[0] * 1000 for r in kept]
            srv_ttft = [r[1] * 1000 for r in kept if r[1] is not None]
            diff = [(r[0] - r[1]) * 1000 for r in kept if r[1] is not None]
            # the histogram's deltas span the whole run: its mean is compared with every request's, warm-up kept
            all_mean = statistics.fmean(r[0] * 1000 for r in recs) if recs else None
            row = [kind, users, rep, busy, cpu_ms, len(recs), pctl(cli, 50), pctl(cli, 95), pctl(srv_ttft, 50),
                   pctl(diff, 50), pctl(diff, 95), statistics.fmean(cli) if cli else None,
                   statistics.fmean(srv_ttft) if srv_ttft else None, hist_n, hist_mean, all_mean,
                   None if all_mean is None or hist_mean is None else all_mean - hist_mean]
            rows.append(row)
            print(f"  {kind:<10} {users:>3} streams rep {rep}: {len(recs)} requests in {time.time() - t0:.1f} s, "
                  f"client TTFT P50 {fmt(row[6])} ms, client - server P50 {fmt(row[9])} ms, busy {busy:.2f} cores",
                  flush=True)
    print()
    print(f"per run (ms; TTFT, server and client - server columns leave out each run's first {a.warmup} requests; "
          "server = chaos_timing first_token - arrival of the same request; histogram = the server's "
          f"{TTFT_METRIC} over the whole run, compared with the client mean over every request of the run; busy = "
          "the whole machine's CPU use, in cores, this benchmark included; client CPU = user + system CPU of the "
          "client's processes per request)")
    print_table(["client", "streams", "rep", "busy", "client CPU ms/req", "requests", "TTFT P50", "TTFT P95", "server P50",
                 "client-server P50", "client-server P95", "client mean", "server mean", "histogram n",
                 "histogram mean", "client mean, all", "client mean, all - histogram mean"], rows,
                "lrrrrrrrrrrrrrrrr")
    if mismatched:
        print("note: the histogram did not count the requests the client timed (a request with tokens but no text, "
              "a failure, or the client's own extra requests): " + "; ".join(mismatched))
    print()
    print("client TTFT - server TTFT per request, every run of a client pooled (ms)")
    table = []
    for (kind, users), recs in pooled.items():
        diff = [(r[0] - r[1]) * 1000 for r in recs if r[1] is not None]
        table.append([kind, users, len(diff), pctl(diff, 50), pctl(diff, 95)])
    print_table(["client", "streams", "requests", "P50", "P95"], table)
    if not any(r[9] is not None for r in rows):
        print("note: the server sent no chaos_timing, so only the histogram comparison is available")
    print(f"load average at end: {loadavg()}  run folder: {work}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke-test size: 20 requests at 1 stream, 40 at 4")
    p.add_argument("--preset", default="tiny", help="reference server preset (default tiny)")
    p.add_argument("--streams", type=lambda v: [int(x) for x in v.split(",")], default=[1, 50],
                   help="concurrent streams, comma-separated (default 1,50)")
    p.add_argument("--requests", type=lambda v: [int(x) for x in v.split(",")], default=[150, 600],
                   help="requests per run for each --streams value (default 150,600)")
    p.add_argument("--input", type=int, default=64, help="input tokens (default 64)")
    p.add_argument("--tokens", type=int, default=16, help="output tokens (default 16, with ignore_eos)")
    p.add_argument("--reps", type=int, default=1, help="repeat each client's run, alternating the order (default 1)")
    p.add_argument("--warmup", type=int, default=5,
                   help="first requests of each run left out of the per-request columns (default 5)")
    p.add_argument("--clients", type=lambda v: ["chaos load" if x.strip() == "chaos" else x.strip()
                                                for x in v.split(",")],
                   default=["chaos load", "aiohttp", "httpx", "guidellm"],
                   help="clients to run, comma-separated: chaos, aiohttp, httpx, guidellm (default: all four)")
    p.add_argument("--guidellm", help="the guidellm executable (default: on PATH)")
    p.add_argument("--httpx-python", help="a python with httpx installed (default: this one)")
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                   help="before each run wait up to S seconds for 3 s with < 0.15 cores busy on the machine")
    p.add_argument("--keep", help="keep run folders here instead of a temp dir")
    # the plain clients' own process (--truth-client KIND)
    p.add_argument("--truth-client", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--bodies", help=argparse.SUPPRESS)
    p.add_argument("--users", type=int, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.truth_client:
        truth_client(a.truth_client, a.url, a.bodies, a.users, a.n, a.out)
        return 0
    if a.quick:
        a.streams, a.requests = [1, 4], [20, 40]
    return truth(a)


if __name__ == "__main__":
    sys.exit(main())
