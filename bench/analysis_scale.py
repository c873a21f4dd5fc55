"""The analysis at scale: a run's requests.jsonl of 1M and 10M synthetic records analysed the old way (every record
a Python object: read_records, then the phase table) and the streaming way (chaos.records.Columns read in chunks,
then the same phase table and the recovery figures), each in a fresh process so its peak RSS is its own.

    python bench/analysis_scale.py              # 1M (old and new) and 10M (new; the old path only if asked)
    python bench/analysis_scale.py --quick      # 100k, both paths
    python bench/analysis_scale.py --sizes 1000000 --old-cap-mb 8000

The records are realistic: an hour of load on 3 instances, ~20 inter-token gaps a streamed record, a few % of
errors (503/429 answers, timeouts), and a kill of r1 at half time, back 60 s later (requests in flight on it cut,
then refused for 2 s, then routed to the other two, slower). They go to a temporary directory on disk (checked
against the free space first) and are deleted afterwards. Prints records/s and peak RSS per path and size and
the ratios; --md PATH writes the same as a BENCHMARKS section.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --old-tree: the old path's child imports chaos from another checkout (e.g. `git archive` of the commit before)
sys.path.insert(0, os.environ.get("BENCH_TREE") or ROOT)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

T0 = 1_800_000_000.0
HOUR = 3600.0
FAULT_AT, FAULT_FOR, REFUSED_FOR, BACK_AFTER = HOUR / 2, 60.0, 2.0, 58.0
INSTANCES = ("r0", "r1", "r2")
BLOCK = 50_000  # records generated at a time (numpy draws), each block a slice of the hour

_LINE = ('{"id":"%s","case":"chat","endpoint":"chat","stream":%s,"t_sched":%r,"t_start":%r,"t_first":%s,'
         '"t_end":%s,"status":%s,"outcome":"%s","error_code":%s,"error":%s,"timeout_kind":%s,"input_tokens":%d,'
         '"input_tokens_source":"exact","server_input_tokens":%s,"requested_tokens":%d,"ignore_eos":true,'
         '"fixed_output":true,"output_tokens":%d,"output_tokens_source":"usage","finish_reason":%s,"chunks":%d,'
         '"max_itl":%s,"itl_p50":%s,"itl_p90":%s,"itl_p99":%s,"itl_us":[%s],"itl_dropped":0,"server_ttft":%s,'
         '"server_e2e":%s,"served_by":"%s","retries":%d,"retry_statuses":[%s],"step":"users=96","worker":"local",'
         '"retry_causes":[%s],"fault":null,"source_line":null,"scrubbed":null,"output_sha":%s,"output_head":%s,'
         '"json_valid":null,"repeat_ngram":%s,"garbled":%s,"stability_key":null,"v":3}\n')
_HEAD = '"The quick brown fox jumps over the lazy dog; a synthetic answer of the benchmark, no more."'
_ERRORS = {  # outcome, status, error_code, timeout_kind
    1: ("http_error", "503", '"overloaded"', "null"),
    2: ("http_error", "429", '"rate_limited"', "null"),
    3: ("timeout", "null", '"timeout"', '"first_token"'),
}


def journal(path: str) -> None:
    """The kill of r1 as the runner's journal tells it."""
    events = [
        {"t": T0 - 1, "event": "load_started"},
        {"t": T0 + FAULT_AT, "event": "fault_applying", "fault": "kill-r1", "type": "kill_instance",
         "plan": {"instances": [{"id": "r1"}]}},
        {"t": T0 + FAULT_AT + 0.01, "event": "fault_applied", "fault": "kill-r1"},
        {"t": T0 + FAULT_AT + FAULT_FOR, "event": "fault_reverted", "fault": "kill-r1",
         "instances": [{"id": "r1", "up_since": T0 + FAULT_AT + BACK_AFTER}]},
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)


def generate(path: str, n: int, seed: int = 1) -> int:
    """n records into path, in order of intended send time; returns the bytes written."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fault, back = T0 + FAULT_AT, T0 + FAULT_AT + FAULT_FOR
    blocks = max(1, -(-n // BLOCK))
    with open(path, "w", buffering=1 << 22) as f:
        for b in range(blocks):
            m = min(BLOCK, n - b * BLOCK)
            lo = T0 + HOUR * b / blocks
            sched = np.sort(rng.uniform(lo, T0 + HOUR * (b + 1) / blocks, m))
            start = sched + rng.exponential(0.0002, m)
            inst = rng.integers(0, 3, m)
            stream = rng.random(m) < 0.95
            ttft = rng.lognormal(np.log(0.12), 0.4, m)
            ngap = np.where(stream, rng.integers(12, 30, m), 0)  # ~20 gaps a streamed record
            gaps = np.maximum(1, rng.lognormal(np.log(15_000), 0.35, (m, 30))).astype(np.int64)
            gaps[np.arange(30)[None, :] >= ngap[:, None]] = 0
            u = rng.random(m)
            err = np.select([u < 0.015, u < 0.02, u < 0.022], [1, 2, 3], 0)
            slow = (start >= fault) & (start < back)
            inst[slow & (inst == 1) & (start >= fault + REFUSED_FOR)] = np.where(rng.random(m) < 0.5, 0, 2)[
                slow & (inst == 1) & (start >= fault + REFUSED_FOR)]
            scale = np.where(slow, 1.4, 1.0)
            ttft *= scale
            gaps = (gaps * scale[:, None]).astype(np.int64)
            e2e = ttft + gaps.sum(1) / 1e6
            ids = rng.integers(0, 2**63, (m, 2))
            tin = rng.integers(20, 2000, m)
            gl, ttft, e2e, tin, ids = gaps.tolist(), ttft.tolist(), e2e.tolist(), tin.tolist(), ids.tolist()
            sched, start, inst, ngap, err, stream = (a.tolist() for a in (sched, start, inst, ngap, err, stream))
            for i in range(m):
                s, t0 = sched[i], start[i]
                k = int(ngap[i])
                row = gl[i][:k]
                out = k + 1 if k else int(tin[i] % 18 + 12)
                outcome, status, code, tkind, first, fin = "ok", "200", "null", "null", t0 + ttft[i], "length"
                end = t0 + e2e[i]
                who = INSTANCES[inst[i]]
                e = int(err[i])
                if who == "r1" and t0 < fault <= end:  # in flight on r1 when it was killed: cut
                    outcome, code, fin, end = "stream_error", '"no_done"', None, fault + 0.02
                    while row and first + sum(row) / 1e6 > fault:
                        row.pop()
                    if first > fault:
                        first, status = None, "null"
                        outcome, code = "reset", "null"
                elif who == "r1" and fault <= t0 < fault + REFUSED_FOR:  # the gateway has not noticed yet
                    outcome, status, code, first, fin, end, row = "connect_error", "null", "null", None, None, \
                        t0 + 0.001, []
                elif e:
                    outcome, status, code, tkind = _ERRORS[e]
                    first, fin, row = None, None, []
                    end = t0 + (10.0 if e == 3 else 0.008)
                if not stream[i]:
                    first = None
                    row = []
                if end > T0 + HOUR + 5:  # the load stopped under it
                    outcome, end = "cancelled", T0 + HOUR + 5
                retry = 1 if ids[i][1] % 100 == 0 else 0
                if row:
                    srt = sorted(row)
                    q = lambda p: repr(srt[int(p * (len(srt) - 1))] / 1e6)  # noqa: E731
                    mx, p50, p90, p99 = repr(srt[-1] / 1e6), q(0.5), q(0.9), q(0.99)
                else:
                    mx = p50 = p90 = p99 = "null"
                ok = outcome == "ok"
                f.write(_LINE % (
                    f"{ids[i][0]:016x}{ids[i][1]:016x}", "true" if stream[i] else "false", s, t0,
                    "null" if first is None else repr(first), repr(end), status, outcome, code,
                    "null" if code == "null" else '"' + outcome + '"', tkind, tin[i],
                    tin[i] if ok else "null", out, out if ok else 0, '"length"' if fin else "null", len(row) + 1 if row
                    else 0, mx, p50, p90, p99, ",".join(map(str, row)), repr(ttft[i] * 0.95) if ok else "null",
                    repr(e2e[i] * 0.98) if ok else "null", who, retry, "503" if retry else "",
                    '"503"' if retry else "", f'"{ids[i][0]:016x}"' if ok else "null", _HEAD if ok else "null",
                    "0.0" if ok else "null", "0" if ok else "null"))
    return os.path.getsize(path)


# -- measuring (in a child process: its peak RSS is its own) ----------------------------------------------------------

SLO_ARGS = {"p95_latency": 1.0, "error_rate": 0.05}
BYTES_A_RECORD = 1150  # the generated lines' average, for the free-space check


def measure(mode: str, path: str, out: str) -> dict:
    """Read the records (old: every record an object; new: Columns), then the recovery figures and the phase
    table, timing each part; the sections go to `out` (JSON) for the parent to compare."""
    from chaos.verify.spec import SLO
    from chaos.rundir.journal import read_journal
    from chaos.verify import phases, recovery

    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "old":
        from chaos.records import read_records

        data = read_records(path)
    else:
        from chaos.records.columns import Columns

        data = Columns.read(path)
    t1 = time.perf_counter()
    journal = read_journal(os.path.join(os.path.dirname(path), "journal.jsonl"))
    fault = T0 + FAULT_AT
    rec = recovery.recovery(data, journal, SLO(**SLO_ARGS), (fault - 60, fault), 5.0)
    t2 = time.perf_counter()
    cuts = phases.cut(recovery.fault_windows(journal), T0, T0 + HOUR + 5, 60.0,
                      (rec["run"] or {}).get("time_to_failover", {}).get("at"))
    table = phases.phase_table(data, cuts)
    t3, c3 = time.perf_counter(), time.process_time()
    with open(out, "w") as f:
        json.dump({"recovery": rec, "phases": table}, f)
    import resource

    return {"mode": mode, "records": len(data), "read_s": t1 - t0, "recovery_s": t2 - t1, "phases_s": t3 - t2,
            "total_s": t3 - t0, "cpu_s": c3 - c0,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "exact_itl": not any("relative_error" in (p["itl"]["p50"] or {}) for p in table)}


def run_child(mode: str, path: str, out: str, cap_mb: float, timeout_s: float, tree: str | None) -> dict:
    """The child, its RSS polled: killed past cap_mb or timeout_s (then its figures are the polled ones)."""
    import psutil

    env = dict(os.environ, BENCH_TREE=tree or "")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--measure", mode, path, out], env=env,
                         stdout=subprocess.PIPE, text=True)
    proc, peak, t = psutil.Process(p.pid), 0.0, time.perf_counter()
    why = None
    while p.poll() is None:
        try:
            peak = max(peak, proc.memory_info().rss / 2**20)
        except psutil.Error:
            pass
        if peak > cap_mb or time.perf_counter() - t > timeout_s:
            why = f"killed at {peak:,.0f} MB" if peak > cap_mb else f"killed after {timeout_s:.0f} s"
            p.kill()
            p.wait()
            break
        time.sleep(0.1)
    if why:
        return {"mode": mode, "status": why, "total_s": time.perf_counter() - t, "peak_mb": peak}
    line = p.stdout.read().strip().splitlines()
    if p.returncode or not line:
        return {"mode": mode, "status": f"failed (exit {p.returncode})", "total_s": time.perf_counter() - t,
                "peak_mb": peak}
    return {**json.loads(line[-1]), "status": "ok"}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    from _table import print_table

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100k records only (well under a minute)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--old-max", type=int, default=1_000_000, help="run the old path up to this many records")
    p.add_argument("--old-cap-mb", type=float, default=6000, help="kill the old path's child past this RSS")
    p.add_argument("--timeout", type=float, default=900, help="kill a child after this many seconds")
    p.add_argument("--old-tree", help="import chaos from this directory for the old path (the code before)")
    p.add_argument("--dir", default=None, help="where to write the generated files (default: the temp dir)")
    p.add_argument("--md", help="also write the results as a BENCHMARKS section to this file")
    p.add_argument("--measure", nargs=3, metavar=("MODE", "PATH", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(*a.measure)))
        return 0
    sizes = [100_000] if a.quick else a.sizes
    import numpy
    try:
        import orjson
        parser = f"orjson {orjson.__version__}"
    except ImportError:
        parser = "stdlib json (orjson not installed)"
    head = (f"host: {platform.node() or 'vm'}  cpus: {os.cpu_count()}  python {platform.python_version()}  "
            f"numpy {numpy.__version__}  parser: {parser}\n"
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  load average at start: {_load()}")
    print(head, flush=True)
    rows, results, notes = [], {}, []
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="analysis-scale-") as tmp:
        for n in sizes:
            need = n * BYTES_A_RECORD * 1.1 + 2e9
            free = shutil.disk_usage(tmp).free
            if free < need:
                notes.append(f"{n:,} records skipped: {free / 1e9:.0f} GB free, {need / 1e9:.0f} GB needed")
                print(notes[-1], flush=True)
                continue
            run = os.path.join(tmp, f"run-{n}")
            os.makedirs(run)
            path = os.path.join(run, "requests.jsonl")
            t = time.perf_counter()
            size = generate(path, n)
            journal(os.path.join(run, "journal.jsonl"))
            gen_s = time.perf_counter() - t
            print(f"{n:,} records: {size / 1e9:.2f} GB generated in {gen_s:.0f} s (load {_load()})", flush=True)
            for mode in (("old", "new") if n <= a.old_max else ("new",)):
                out = os.path.join(run, f"{mode}.json")
                r = run_child(mode, path, out, a.old_cap_mb if mode == "old" else 1e12, a.timeout,
                              a.old_tree if mode == "old" else None)
                r.update(n=n, file_gb=size / 1e9, out=out)
                results[(n, mode)] = r
                print(f"  {mode}: {r['status']}, {r['total_s']:.1f} s, peak {r['peak_mb']:,.0f} MB "
                      f"(load {_load()})", flush=True)
                rows.append([f"{n:,}", mode, r["status"], r.get("read_s"), r.get("recovery_s"), r.get("phases_s"),
                             r["total_s"], r.get("cpu_s"), n / r["total_s"] if r["status"] == "ok" else None,
                             r["peak_mb"], "exact" if r.get("exact_itl") else "binned" if "exact_itl" in r else "-"])
            old, new = results.get((n, "old")), results.get((n, "new"))
            if old and new and old["status"] == new["status"] == "ok":
                with open(old["out"]) as f1, open(new["out"]) as f2:
                    same = json.load(f1) == json.load(f2)
                notes.append(f"{n:,}: old/new time {old['total_s'] / new['total_s']:.1f}x, peak RSS "
                             f"{old['peak_mb'] / new['peak_mb']:.1f}x; phases and recovery "
                             + ("identical" if same else "DIFFER"))
            os.remove(path)  # several GB: gone before the next size is written
    headers = ["records", "path", "status", "read s", "recovery s", "phases s", "total s", "cpu s", "records/s",
               "peak MB", "ITL"]
    print()
    print_table(headers, rows)
    for x in notes:
        print(x)
    print(f"load average at end: {_load()}")
    if a.md:
        _markdown(a.md, head, headers, rows, notes, a)
    return 0


def _markdown(path: str, head: str, headers: list, rows: list, notes: list, a) -> None:
    import io
    from contextlib import redirect_stdout

    from _table import print_table

    buf = io.StringIO()
    with redirect_stdout(buf):
        print(head)
        print()
        print_table(headers, rows)
        for x in notes:
            print(x)
        print(f"load average at end: {_load()}")
    args = " ".join(sys.argv[1:]).replace(f"--md {a.md}", "").strip()
    with open(path, "w") as f:
        f.write(f"## Analysis at scale: 1M and 10M records, streaming\n\n```\npython bench/analysis_scale.py "
                f"{args}\n```\n\n```\n{buf.getvalue()}```\n")


if __name__ == "__main__":
    sys.exit(main())
