"""Calibration of the game-day change points (chaos/gameday/changes.py: E-divisive means with a t-test over each
key figure's history) on simulated, seeded histories.

What it simulates
-----------------
One key figure, a time of 60 ms, over 100 nightly game days, its run-to-run spread lognormal with a log-sd of 0.1
or 0.2 (two game days of the same code moved kill-instance's steady E2E P99 from 53 to 76 ms: ~0.2). Each game
day the detector runs again over the history so far, as `chaos gameday` does at the Rule's defaults (window 30,
p < 0.001, 10 % and 5 ms, from 5 game days):

* flat:  nothing changes. Every change point any game day reports is a false alarm (counted once, by the game day
  it names).
* step:  +20 % from game day 50 on. A change point within 3 game days of 50 is the step found; its delay is the
  game days after the step until a game day's report first names it (0: the step's own game day). Any other is a
  false alarm.
* drift: +20 % spread evenly over game days 30-80 (0.4 % a game day), level after. What is reported, where, and how
  much had drifted when it was first reported.

Rates come with their own intervals: a share of histories with Clopper-Pearson (scipy.stats.binomtest), false
alarms per 100 game days with the exact Poisson interval of their count.

Usage: python bench/changepoints.py [--histories 200] [--days 100] [--seed 0] [--max-p 0.001] [--window 30]
       [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from _table import print_table
from scipy import stats

from chaos.gameday.changes import Rule, figure_changes
from chaos.gameday.history import Point

STEP_AT, STEP, NEAR = 50, 1.20, 3
DRIFT_FROM, DRIFT_TO = 30, 80


def history(kind: str, sd: float, days: int, rng) -> np.ndarray:
    level = np.ones(days)
    if kind == "step":
        level[STEP_AT:] = STEP
    elif kind == "drift":
        level = 1 + (STEP - 1) * np.clip((np.arange(days) - DRIFT_FROM) / (DRIFT_TO - DRIFT_FROM), 0, 1)
    return 0.060 * level * rng.lognormal(0.0, sd, days)


def replay(values: np.ndarray, rule: Rule) -> dict[int, int]:
    """Each game day's report over the history so far: change point (its game day) -> the game day that first
    reported it."""
    pts = [Point(i, float(i), "kill", "E2E P99, steady state", float(v), None, None, None, "s")
           for i, v in enumerate(values)]
    first: dict[int, int] = {}
    for t in range(rule.min_history, len(pts) + 1):
        for c in figure_changes(pts[:t], rule):
            first.setdefault(c.at.gameday_id, t - 1)
    return first


def one(args: tuple) -> dict:
    kind, sd, days, seed, max_p, window = args
    rule = Rule(window=window, max_p=max_p)
    values = history(kind, sd, days, np.random.default_rng(seed))
    first = replay(values, rule)
    final = sorted(c.at.gameday_id for c in figure_changes(
        [Point(i, float(i), "kill", "E2E P99, steady state", float(v), None, None, None, "s")
         for i, v in enumerate(values)], rule))
    out = {"kind": kind, "sd": sd, "final": final, "first": first}
    if kind == "step":
        hits = [t for at, t in first.items() if abs(at - STEP_AT) <= NEAR]
        out["delay"] = min(hits) - STEP_AT if hits else None
        out["false"] = sum(abs(at - STEP_AT) > NEAR for at in first)
    elif kind == "flat":
        out["false"] = len(first)
    else:
        out["flagged_at"] = min(first.values()) if first else None
    return out


def poisson_ci(count: int, exposure: float) -> tuple[float, float]:
    lo = stats.chi2.ppf(0.025, 2 * count) / 2 if count else 0.0
    hi = stats.chi2.ppf(0.975, 2 * count + 2) / 2
    return lo / exposure, hi / exposure


def share(k: int, n: int) -> str:
    ci = stats.binomtest(k, n).proportion_ci(0.95)
    return f"{100 * k / n:.0f} % [{100 * ci.low:.0f}-{100 * ci.high:.0f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--histories", type=int, default=200, help="simulated histories per scenario and spread")
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-p", type=float, default=Rule().max_p)
    ap.add_argument("--window", type=int, default=Rule().window)
    ap.add_argument("--quick", action="store_true", help="20 histories each: a smoke run")
    a = ap.parse_args()
    n = 20 if a.quick else a.histories
    t0 = time.time()
    jobs = [(kind, sd, a.days, a.seed * 1_000_003 + 7919 * i + 31 * j + (k * 101), a.max_p, a.window)
            for j, sd in enumerate((0.1, 0.2)) for k, kind in enumerate(("flat", "step", "drift")) for i in range(n)]
    with ProcessPoolExecutor() as pool:
        res = list(pool.map(one, jobs, chunksize=4))
    print(f"# {n} histories of {a.days} game days a row; window {a.window}, p < {a.max_p}; seed {a.seed}; "
          f"{time.time() - t0:.0f} s", file=sys.stderr)
    rows = []
    for sd in (0.1, 0.2):
        for kind in ("flat", "step", "drift"):
            rs = [r for r in res if r["sd"] == sd and r["kind"] == kind]
            row = [f"{kind}, sd {sd}"]
            if kind in ("flat", "step"):
                fa = sum(r["false"] for r in rs)
                lo, hi = poisson_ci(fa, len(rs) * a.days / 100)
                row += [f"{fa / (len(rs) * a.days / 100):.2f} [{lo:.2f}-{hi:.2f}]",
                        share(sum(r["false"] > 0 for r in rs), len(rs))]
            else:
                row += ["-", "-"]
            if kind == "step":
                d = [r["delay"] for r in rs if r["delay"] is not None]
                q = np.percentile(d, [10, 90]) if d else (None, None)
                row += [share(len(d), len(rs)), f"{statistics.median(d):.0f} [{q[0]:.0f}-{q[1]:.0f}]" if d else "-",
                        share(sum(x <= 10 for x in d), len(rs))]
            elif kind == "drift":
                f = [r["flagged_at"] for r in rs if r["flagged_at"] is not None]
                where = [at for r in rs for at in r["final"]]
                drifted = [100 * (STEP - 1) * min(1, max(0, (t - DRIFT_FROM) / (DRIFT_TO - DRIFT_FROM))) for t in f]
                row += [share(len(f), len(rs)),
                        f"day {statistics.median(f):.0f} (+{statistics.median(drifted):.0f} %)" if f else "-",
                        f"{len(where) / len(rs):.1f} a history, at day {np.percentile(where, 10):.0f}-"
                        f"{np.percentile(where, 90):.0f}" if where else "none"]
            else:
                row += ["-", "-", "-"]
            rows.append(row)
    print_table(["history", "false alarms / 100 game days", "histories with one", "change found",
                 "delay (drift: first flagged)", "by 10 days (drift: at the end)"], rows, align="llllll")
    return 0


if __name__ == "__main__":
    sys.exit(main())
