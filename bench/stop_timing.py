"""How fast a run stops: Ctrl-C (SIGINT) while link faults and a stalled stream are active, and abort_when after
its breach. Real `chaos run` processes against two tiny reference replicas behind the gateway.

    python bench/stop_timing.py              # 10 of each, ~4 min on 2 cores
    python bench/stop_timing.py --runs 3     # a smoke run

Ctrl-C: a latency toxic on r1's link (Toxiproxy) and a stream stall on the same link (the LLM fault proxy) are
both on when SIGINT comes, at a seeded random moment 0.5-3 s after the second was applied. Measured from the
signal, on the journal's clock: every fault reverted, the target stopped, the process gone.

abort_when: every request fails from 2 s in (a server hook, fail_fraction 1.0), abort_when {error_rate: 50%,
for: 2s}. The breach is the first moment the rule holds over the run's own records (the error rate of the
requests that ended in the last 2 s, with at least 5 of them); measured from there to the journal's abort.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from _table import print_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = """target:
  kind: reference
  replicas: 2
  preset: tiny
  gateway: {retries: 2, stream_idle_timeout: 2s, eject: {after_failures: 3, for: 5s}}
"""
CTRL_C = f"""name: stop-timing
{TARGET}load: {{workload: chat, users: 4, duration: 40s, output_tokens: 16-24}}
faults:
  - {{type: latency, name: slow-r1, at: 2s, link: r1, latency: 50ms, duration: 30s}}
  - {{type: stream_stall, name: stall-r1, at: 2.5s, link: r1, after_tokens: 4, stall_for: 30s, duration: 30s}}
"""
ABORT = f"""name: abort-timing
{TARGET}load: {{workload: chat, users: 4, duration: 40s, output_tokens: 4-8}}
faults:
  - {{type: server_hook, at: 2s, fail_fraction: 1.0, duration: 30s}}
abort_when: {{error_rate: 50%, for: 2s}}
"""


def journal(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "journal.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for(run_dir: str, event: str, count: int, proc, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while sum(e["event"] == event for e in journal(run_dir)) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the run ended (or took over {timeout:.0f} s) before {count} {event}")
        time.sleep(0.05)


def run(exp: str, run_dir: str) -> subprocess.Popen:
    path = run_dir + ".yaml"
    with open(path, "w") as f:
        f.write(exp)
    return subprocess.Popen([sys.executable, "-m", "chaos", "run", path, "--out", run_dir, "--json"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ctrl_c(run_dir: str, rng: random.Random) -> dict:
    p = run(CTRL_C, run_dir)
    wait_for(run_dir, "fault_applied", 2, p)
    time.sleep(rng.uniform(0.5, 3.0))
    sent = time.time()
    p.send_signal(signal.SIGINT)
    code = p.wait(60)
    gone = time.time()
    ev = journal(run_dir)
    reverted = [e["t"] for e in ev if e["event"] == "fault_reverted"]
    stopped = next(e["t"] for e in ev if e["event"] == "target_stopped")
    assert code == 130 and len(reverted) == 2, (code, reverted)
    return {"reverted": max(reverted) - sent, "target stopped": stopped - sent, "exited": gone - sent}


def breach(records: list[dict], rate: float, span: float) -> float | None:
    """The first record end at which the error rate of the records ended in the last span s reaches rate."""
    ends = sorted((r["t_end"], r["outcome"] not in ("ok", "cancelled")) for r in records if r.get("t_end"))
    for i, (t, _) in enumerate(ends):
        window = [bad for u, bad in ends[:i + 1] if u >= t - span]
        if len(window) >= 5 and sum(window) / len(window) >= rate:
            return t
    return None


def abort(run_dir: str) -> dict:
    p = run(ABORT, run_dir)
    code = p.wait(120)
    ev = journal(run_dir)
    at = next(e["t"] for e in ev if e["event"] == "abort")
    with open(os.path.join(run_dir, "requests.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    t_breach = breach(records, 0.5, 2.0)
    assert code == 3 and t_breach is not None, (code, t_breach)
    return {"abort after breach": at - t_breach}


def summary(rows: list[dict]) -> list[list]:
    out = []
    for key in rows[0]:
        xs = sorted(r[key] for r in rows)
        out.append([key, len(xs), f"{statistics.median(xs):.2f}", f"{xs[int(0.9 * (len(xs) - 1))]:.2f}",
                    f"{xs[-1]:.2f}"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs of each kind (default 10)")
    ap.add_argument("--seed", type=int, default=30, help="seed of the moments SIGINT is sent at")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="stop-timing-") as tmp:
        stops, aborts = [], []
        for i in range(args.runs):
            stops.append(ctrl_c(os.path.join(tmp, f"c{i}"), rng))
            aborts.append(abort(os.path.join(tmp, f"a{i}")))
            print(f"run {i + 1}/{args.runs}: SIGINT -> exit {stops[-1]['exited']:.2f} s, "
                  f"breach -> abort {aborts[-1]['abort after breach']:.2f} s", flush=True)
    print("\nseconds from SIGINT (latency toxic and stream stall on r1's link both active) / from the breach")
    print_table(["measure", "runs", "median", "P90", "max"], summary(stops) + summary(aborts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
