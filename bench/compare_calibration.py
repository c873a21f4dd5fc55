"""Calibration of the run comparison (chaos/verify/compare.py) on this machine, with the real tools.

What it measures
----------------
One reference server (`chaos reference serve`, fault hooks on) serves every run. Each repeat drives three load
runs back to back with the real load tool (`python -m chaos load URL --users N --duration D --out DIR`), reading
each run's requests.jsonl:

    A  (step_slowdown 1.0)   B  (step_slowdown 1.0)   C  (step_slowdown 1.2: every engine step 20 % longer)

and compares two pairs, each of two consecutive runs:

* same code:  A vs B. Every figure must come out "no detectable change" after Holm's correction over the family:
  TTFT and E2E (distribution by Mann-Whitney; P50, P95, P99 by bootstrap), error rate, throughput.
  Aim: all figures unchanged in >= 95 % of repeats.
* slowdown:   B vs C. E2E P50 must come out "worse" (after the same correction). Aim: >= 95 % of repeats.

B is in both pairs (so three runs a repeat, not four); the pairs are judged separately.

The comparison treats requests as independent draws. Within a run they are not (a busy stretch of the host
slows neighbours together), and two runs of the same code differ by more than sampling noise on a shared box, so
pure statistics (tolerance 0) flags drifts of a few percent. --tolerance is the smallest relative change that
counts (the gate's minimum effect size); the table prints, for the same-code pairs, the largest ratio seen per
figure, which is what a tolerance must cover.

Usage: python bench/compare_calibration.py [--repeats 20] [--quick] [--users 8] [--duration 10]
       [--preset small] [--tolerance 0.1] [--slowdown 1.2]
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


def load_run(url: str, args, out: str) -> list:
    cmd = [sys.executable, "-m", "chaos", "load", url, "--users", str(args.users), "--duration", f"{args.duration}s",
           "--out", out, "--interval", "3600", "--seed", "0"]
    if args.output_tokens:
        cmd += ["--output-tokens", args.output_tokens]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 120)
    if p.returncode != 0:
        raise RuntimeError(f"chaos load exited {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")
    return read_records(os.path.join(out, "requests.jsonl"))


def run_figures(ra: list, rb: list, duration: float, tolerance: float, seed: int) -> list[dict]:
    """Every compared figure of run a against run b, after Holm's correction over all of them."""
    def lat(rs, attr):
        return [getattr(r, attr) for r in rs if r.outcome == "ok" and getattr(r, attr) is not None]

    def errors(rs):
        judged = [r for r in rs if r.outcome != "cancelled"]
        return sum(r.outcome in ERROR_OUTCOMES for r in judged), len(judged)

    def ok_done(rs):  # finished OK inside the planned duration: the throughput count
        t0 = min(r.t_sched for r in rs)
        return sum(1 for r in rs if r.outcome == "ok" and r.t_end is not None and r.t_end <= t0 + duration)

    figs = []
    for name in ("ttft", "e2e"):
        res = compare_latency(lat(ra, name), lat(rb, name), tolerance=tolerance, seed=seed, name=name.upper())
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
    return fig["a"]["value"] is not None and fig["difference"]["value"]  # proportions: the difference b - a


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="3 repeats")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of load per run")
    p.add_argument("--preset", default="small")
    p.add_argument("--threads", type=int, default=1,
                   help="server torch threads: with 2 on a contended 2-core box, each wait between steps also costs "
                        "waking torch's worker thread, so a slowdown of x1.2 comes out far larger")
    p.add_argument("--output-tokens", default="32", help="passed to chaos load --output-tokens ('' for the workload's)")
    p.add_argument("--tolerance", type=float, default=0.1, help="smallest relative change that counts")
    p.add_argument("--slowdown", type=float, default=1.2)
    args = p.parse_args()
    repeats = 3 if args.quick else args.repeats

    print("== comparison calibration: same code twice vs a step slowdown ==")
    print(f"host: {platform.node()}  cpus: {os.cpu_count()}  python {platform.python_version()}  "
          f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"server: preset {args.preset}   load: chat, {args.users} users, {args.duration:g}s a run, output tokens "
          f"{args.output_tokens or 'workload default'}   repeats: {repeats} (3 runs each: A, B same; C slowdown "
          f"{args.slowdown})   tolerance {args.tolerance:g}, confidence 0.95, Holm over each pair's figures\n")

    t_start = time.time()
    per_fig: dict[str, dict] = {}
    null_clean = slow_hit = 0
    with tempfile.TemporaryDirectory(prefix="compare-cal-") as tmp, \
            start_server(["--preset", args.preset, "--threads", str(args.threads), "--enable-fault-hooks",
                          "--log-level", "error"]) as server:
        # One short warm-up run: the first requests after start pay one-time costs no later run pays.
        load_run(server.base_url, argparse.Namespace(**{**vars(args), "duration": 3.0}), os.path.join(tmp, "warm"))
        for i in range(repeats):
            runs = []
            for tag, factor in (("A", 1.0), ("B", 1.0), ("C", args.slowdown)):
                set_slowdown(server, factor)
                runs.append(load_run(server.base_url, args, os.path.join(tmp, f"{i}{tag}")))
            set_slowdown(server, 1.0)
            same = run_figures(runs[0], runs[1], args.duration, args.tolerance, seed=i)
            slow = run_figures(runs[1], runs[2], args.duration, args.tolerance, seed=i)
            clean = all(f["verdict"] in (SAME, NOT_JUDGED) for f in same)
            e2e_p50 = next(f for f in slow if f["figure"] == "E2E p50")
            null_clean += clean
            slow_hit += e2e_p50["verdict"] == WORSE
            for f_same, f_slow in zip(same, slow):
                d = per_fig.setdefault(f_same["figure"], {"flag": 0, "worse": 0, "nj": 0, "r_same": [], "r_slow": []})
                d["flag"] += f_same["verdict"] not in (SAME, NOT_JUDGED)
                d["nj"] += f_same["verdict"] == NOT_JUDGED
                d["worse"] += f_slow["verdict"] == WORSE
                for key, f in (("r_same", f_same), ("r_slow", f_slow)):
                    r = ratio_of(f)
                    if r is not None:
                        d[key].append(r)
            flagged = [f"{f['figure']} {f['verdict']}" for f in same if f["verdict"] not in (SAME, NOT_JUDGED)]
            flagged = flagged or ["none"]
            print(f"  repeat {i + 1:2d}/{repeats}: n={len(runs[0])}/{len(runs[1])}/{len(runs[2])}  same-code flags: "
                  f"{', '.join(flagged)};  slowdown E2E P50 x{e2e_p50['ratio']['value']:.3f} -> {e2e_p50['verdict']}"
                  f"  (load {os.getloadavg()[0]:.2f})", flush=True)

    print()
    rows = []
    for name, d in per_fig.items():
        def med(xs):
            return statistics.median(xs) if xs else None
        worst_same = max(d["r_same"], key=lambda r: abs(r - 1) if name != "error rate" else abs(r), default=None)
        rows.append([name, f"{d['flag']}/{repeats}" + (f" ({d['nj']} not judged)" if d["nj"] else ""), med(d["r_same"]), worst_same,
                     f"{d['worse']}/{repeats}", med(d["r_slow"])])
    print_table(["figure", "same: flagged", "same: median b/a", "same: furthest b/a", "slowdown: worse",
                 "slowdown: median b/a"], rows)
    print("(b/a: ratio of run b's figure to run a's; error rate: b - a; distribution: no ratio)\n")
    print(f"same code, every figure 'no detectable change':  {null_clean}/{repeats} = {100 * null_clean / repeats:.0f} %"
          f"   (aim >= 95 %)")
    print(f"slowdown x{args.slowdown:g}, E2E P50 'worse':            {slow_hit}/{repeats} = "
          f"{100 * slow_hit / repeats:.0f} %   (aim >= 95 %)")
    print(f"wall time {time.time() - t_start:.0f} s; load average at end: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if null_clean >= 0.95 * repeats and slow_hit >= 0.95 * repeats else 1


if __name__ == "__main__":
    sys.exit(main())
