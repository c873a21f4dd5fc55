"""Calibration of the run comparison (chaos/verify/compare.py) on this machine, with the real tools.

What it measures
----------------
One reference server (`chaos reference serve --preset tiny --threads 1`, fault hooks on) serves every run. Each
repeat drives three load runs back to back with the real load tool (`python -m chaos load URL --users 16
--duration 10s --output-tokens 64 --out DIR`), reading each run's requests.jsonl:

    A  (step_slowdown off)   B  (step_slowdown off)   C  (step_slowdown 1.2: every engine step 20 % longer)

and compares two pairs, each of two consecutive runs:

* same code:  A vs B. Every judged figure must come out "no detectable change" after Holm's correction over the
  pair's family: TTFT and E2E P50, P95, P99 (bootstrap ratio intervals), error rate, throughput.
  Aim: all unchanged in >= 95 % of repeats.
* slowdown:   B vs C. E2E P50 must come out "worse" (after the same correction). Aim: >= 95 % of repeats.

B is in both pairs (three runs a repeat, not four); the pairs are judged separately.

Method choices, and why (each measured with this script on this box):
* tolerance 0.1: a change must exceed 10 % to count. Two runs of the same code never match exactly, and with
  ~1,000 requests a run pure statistics (tolerance 0) calls a drift of a few percent real (--tolerance 0 shows
  it). 10 % is half the slowdown that must be caught, so a 20 % regression clears it with room for its own
  interval.
* latency resampled by 0.5 s windows of start time (compare_latency's groups), not by request: 16 requests in
  flight together share every hiccup of the host, so their latencies are not independent; resampled one by one,
  same-code pairs flagged TTFT (a few ms on this model) in most repeats. The Mann-Whitney figures cannot see the
  windows, so they are shown but not judged.
* fixed output length (64 tokens): with the chat workload's own mix, E2E mostly measures which lengths a run
  happened to draw.
* the server on one torch thread: with two, each wait between steps also lets torch's worker thread fall asleep,
  and on a busy 2-core box waking it made the steps themselves slower (in-process, factor 3: steps 1.6-2x slower,
  10 x overall; with one thread the steps kept their time), so step_slowdown 1.2 came out far above x1.2.

The machine is shared: "other cores" is the CPU everything else on it used during each run. Same-code runs under
different outside load differ for reasons no statistics on their requests can see, so the rates are printed for
all repeats and, beside them (never instead), for the repeats whose runs all had the rest of the machine quiet.

Usage: python bench/compare_calibration.py [--repeats 20] [--quick] [--users 16] [--duration 10]
       [--preset tiny] [--tolerance 0.1] [--block 0.5] [--slowdown 1.2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import resource
import urllib.request

import psutil
from _table import print_table

from chaos.common import FAULT_TOKEN_HEADER
from chaos.records import ERROR_OUTCOMES, read_records
from chaos.reference.launcher import start_server
from chaos.verify.compare import (NOT_JUDGED, SAME, WORSE, compare_figures, compare_latency, compare_proportions,
                                  compare_rates, latency_figures)


def set_slowdown(server, factor: float) -> None:
    """POST the hook (factor > 1) or DELETE it (1.0), with the server's fault token."""
    if factor > 1.0:
        req = urllib.request.Request(server.base_url + "/admin/faults", method="POST",
                                     data=json.dumps({"step_slowdown": factor}).encode(),
                                     headers={"Content-Type": "application/json",
                                              FAULT_TOKEN_HEADER: server.fault_token})
    else:
        req = urllib.request.Request(server.base_url + "/admin/faults/step_slowdown", method="DELETE",
                                     headers={FAULT_TOKEN_HEADER: server.fault_token})
    with urllib.request.urlopen(req, timeout=10) as r:
        active = json.loads(r.read())["active"]
    if (factor > 1.0) != ("step_slowdown" in active):
        raise RuntimeError(f"the server did not take step_slowdown={factor}: active hooks {active}")


class HostMeter:
    """CPU the rest of the machine used during a run, in cores: machine-wide busy CPU minus the server's, the load
    tool's (a waited-for child: its Locust is counted through it) and this process's. Two runs of the same code
    can only be compared fairly when this was about the same in both; on a 2-core box shared with other jobs it
    often is not, and then the runs differ for reasons no statistics on their requests can see."""

    def __init__(self, server_pid: int):
        self.server = psutil.Process(server_pid)

    def _now(self):
        t = psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
        srv = self.server.cpu_times()  # its own; a helper process it may start is counted with "other"
        kids, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        ours = srv.user + srv.system + kids.ru_utime + kids.ru_stime + me.ru_utime + me.ru_stime
        return time.monotonic(), busy, ours

    def __enter__(self):
        self.start = self._now()
        return self

    def __exit__(self, *exc):
        (t0, b0, o0), (t1, b1, o1) = self.start, self._now()
        self.other_cores = max(0.0, (b1 - b0) - (o1 - o0)) / max(t1 - t0, 1e-9)


def load_run(url: str, args, out: str) -> list:
    cmd = [sys.executable, "-m", "chaos", "load", url, "--users", str(args.users), "--duration", f"{args.duration}s",
           "--out", out, "--interval", "3600", "--seed", "0"]
    if args.output_tokens:
        cmd += ["--output-tokens", args.output_tokens]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 120)
    if p.returncode != 0:
        raise RuntimeError(f"chaos load exited {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
    return read_records(os.path.join(out, "requests.jsonl"))


def run_figures(ra: list, rb: list, duration: float, tolerance: float, seed: int, block_s: float) -> list[dict]:
    """Every compared figure of run a against run b, after Holm's correction over all of them. Latency is resampled
    by block_s windows of start time (compare_latency's groups)."""
    def lat(rs, attr):
        t0 = min(r.t_sched for r in rs)
        ok = [r for r in rs if r.outcome == "ok" and getattr(r, attr) is not None]
        return [getattr(r, attr) for r in ok], [int((r.t_start - t0) // block_s) if block_s else i
                                                 for i, r in enumerate(ok)]

    def errors(rs):
        judged = [r for r in rs if r.outcome != "cancelled"]
        return sum(r.outcome in ERROR_OUTCOMES for r in judged), len(judged)

    def ok_done(rs):  # finished OK inside the planned duration: the throughput count
        t0 = min(r.t_sched for r in rs)
        return sum(1 for r in rs if r.outcome == "ok" and r.t_end is not None and r.t_end <= t0 + duration)

    figs = []
    for name in ("ttft", "e2e"):
        (va, ga), (vb, gb) = lat(ra, name), lat(rb, name)
        res = compare_latency(va, vb, tolerance=tolerance, seed=seed, name=name.upper(),
                              groups=(ga, gb) if block_s else None)
        figs += latency_figures(res)
    figs.append(compare_proportions(*errors(ra), *errors(rb)))  # absolute error-rate change: no tolerance
    figs.append(compare_rates(ok_done(ra), duration, ok_done(rb), duration, tolerance=tolerance))
    return compare_figures(figs)


def ratio_of(fig: dict) -> float | None:
    r = fig.get("ratio")
    if r:
        return r["value"]
    if fig.get("kind") != "proportion" or fig["verdict"] == NOT_JUDGED:
        return None
    return fig["difference"]["value"]  # proportions: the difference b - a


def collect(args, root: str, repeats: int, stack):
    """Yield each repeat's three runs' records and the outside load during each, as they are run."""
    server = stack.enter_context(start_server(["--preset", args.preset, "--threads", str(args.threads),
                                               "--enable-fault-hooks", "--log-level", "error"]))
    # One short warm-up run: the first requests after start pay one-time costs no later run pays.
    load_run(server.base_url, argparse.Namespace(**{**vars(args), "duration": 3.0}), os.path.join(root, "warm"))
    meter = HostMeter(server.pid)
    hosts = []
    for i in range(repeats):
        runs, other = [], []
        for tag, factor in (("A", 1.0), ("B", 1.0), ("C", args.slowdown)):
            set_slowdown(server, factor)
            with meter:
                runs.append(load_run(server.base_url, args, os.path.join(root, f"{i}{tag}")))
            other.append(meter.other_cores)
        set_slowdown(server, 1.0)
        hosts.append(other)
        with open(os.path.join(root, "kept.json"), "w") as f:
            json.dump({"duration": args.duration, "slowdown": args.slowdown, "other_cores": hosts}, f)
        yield runs, other


def read_kept(args, root: str, repeats: int):
    """The runs a --keep DIR holds, to judge them again with other settings (no server, no load)."""
    with open(os.path.join(root, "kept.json")) as f:
        kept = json.load(f)
    args.duration, args.slowdown = kept["duration"], kept["slowdown"]
    for i, other in enumerate(kept["other_cores"][:repeats]):
        yield [read_records(os.path.join(root, f"{i}{tag}", "requests.jsonl")) for tag in "ABC"], other


def tally(rows: list[dict], repeats_label: str) -> None:
    """The per-figure table and the two rates over these repeats."""
    k = len(rows)
    if not k:
        print(f"({repeats_label}: none)")
        return
    names = [f["figure"] for f in rows[0]["same"]]
    table = []
    for j, name in enumerate(names):
        same = [r["same"][j] for r in rows]
        slow = [r["slow"][j] for r in rows]
        flagged = sum(f["verdict"] not in (SAME, NOT_JUDGED) for f in same)
        nj = sum(f["verdict"] == NOT_JUDGED for f in same)
        r_same = [x for f in same if (x := ratio_of(f)) is not None]
        r_slow = [x for f in slow if (x := ratio_of(f)) is not None]
        furthest = max(r_same, key=lambda r: abs(r) if name == "error rate" else abs(math.log(r)), default=None)
        table.append([name, f"{flagged}/{k}" + (f" ({nj} not judged)" if nj else ""),
                      statistics.median(r_same) if r_same else None, furthest,
                      f"{sum(f['verdict'] == WORSE for f in slow)}/{k}",
                      statistics.median(r_slow) if r_slow else None])
    print(f"{repeats_label}:")
    print_table(["figure", "same: flagged", "same: median b/a", "same: furthest b/a", "slowdown: worse",
                 "slowdown: median b/a"], table)
    clean = sum(r["clean"] for r in rows)
    hit = sum(r["hit"] for r in rows)
    print(f"  same code, every figure 'no detectable change': {clean}/{k} = {100 * clean / k:.0f} %   (aim >= 95 %)")
    print(f"  slowdown, E2E P50 'worse':                       {hit}/{k} = {100 * hit / k:.0f} %   (aim >= 95 %)\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="3 repeats")
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per run")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--threads", type=int, default=1,
                   help="server torch threads: with 2 on a contended 2-core box, each wait between steps also costs "
                        "waking torch's worker thread, so a slowdown of x1.2 comes out far larger")
    p.add_argument("--output-tokens", default="64",
                   help="chaos load --output-tokens ('' for the workload's own mix, which makes E2E far noisier)")
    p.add_argument("--tolerance", type=float, default=0.1, help="smallest relative change that counts")
    p.add_argument("--slowdown", type=float, default=1.2)
    p.add_argument("--block", type=float, default=0.5, metavar="SECONDS",
                   help="latency is resampled by windows of this much start time (0 for independent requests)")
    p.add_argument("--keep", metavar="DIR", help="keep every run's output in DIR (for --reanalyse)")
    p.add_argument("--reanalyse", metavar="DIR", help="judge the runs kept in DIR again with these settings "
                                                         "(--tolerance, --block); runs nothing")
    p.add_argument("--quiet-below", type=float, default=0.2, metavar="CORES",
                   help="a pair counts as undisturbed when the rest of the machine used less than this many cores "
                        "in each of its runs (reported beside the overall rates, never instead of them)")
    args = p.parse_args()
    repeats = 3 if args.quick else args.repeats

    print("== comparison calibration: same code twice vs a step slowdown ==")
    print(f"host: {platform.node()}  cpus: {os.cpu_count()}  python {platform.python_version()}  "
          f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"server: preset {args.preset}, {args.threads} torch thread(s)   load: chat, {args.users} users, "
          f"{args.duration:g}s a run, output tokens {args.output_tokens or 'workload mix'}\n"
          f"repeats: {repeats}, 3 runs each (A, B: same code; C: step_slowdown {args.slowdown})   "
          f"tolerance {args.tolerance:g}, confidence 0.95, latency resampled by "
          f"{f'{args.block:g}s windows' if args.block else 'request'}, Holm over each pair's judged figures\n")

    t_start = time.time()
    rows = []
    with contextlib.ExitStack() as stack:
        root = args.reanalyse or args.keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="compare-cal-"))
        runs_of = read_kept(args, root, repeats) if args.reanalyse else collect(args, root, repeats, stack)
        for i, (runs, other) in enumerate(runs_of):
            same = run_figures(runs[0], runs[1], args.duration, args.tolerance, i, args.block)
            slow = run_figures(runs[1], runs[2], args.duration, args.tolerance, i, args.block)
            e2e_p50 = next(f for f in slow if f["figure"] == "E2E p50")
            row = {"same": same, "slow": slow, "other": other,
                   "clean": all(f["verdict"] in (SAME, NOT_JUDGED) for f in same), "hit": e2e_p50["verdict"] == WORSE}
            rows.append(row)
            flagged = [f"{f['figure']} {f['verdict']}" for f in same if f["verdict"] not in (SAME, NOT_JUDGED)]
            print(f"  repeat {i + 1:2d}/{repeats}: n={len(runs[0])}/{len(runs[1])}/{len(runs[2])}  other cores "
                  f"{other[0]:.2f}/{other[1]:.2f}/{other[2]:.2f}  same-code flags: {', '.join(flagged) or 'none'};  "
                  f"slowdown E2E P50 x{e2e_p50['ratio']['value']:.3f} -> {e2e_p50['verdict']}", flush=True)
        repeats = len(rows)

    print()
    tally(rows, f"all {repeats} repeats")
    quiet = [r for r in rows if max(r["other"]) < args.quiet_below]
    tally(quiet, f"the {len(quiet)} repeats whose three runs had the rest of the machine below {args.quiet_below:g} "
                 f"cores")
    print("(b/a: ratio of run b's figure to run a's; error rate: b - a; distribution figures: no ratio. other cores: "
          "CPU the rest of the machine used during each run A/B/C)")
    print(f"wall time {time.time() - t_start:.0f} s; load average at end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    clean = sum(r["clean"] for r in rows)
    hit = sum(r["hit"] for r in rows)
    return 0 if clean >= 0.95 * repeats and hit >= 0.95 * repeats else 1


if __name__ == "__main__":
    sys.exit(main())
