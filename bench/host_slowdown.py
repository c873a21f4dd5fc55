"""What a neighbour's CPU does to a run's latency on this machine: the basis of the gate's host bound (docs/gate.md,
"The host"; BENCHMARKS.md §15).

Runs experiments/upgrade-check.yaml (the gate's runs: tiny-long, 16 s of load) beside a constant neighbour of
0, 0.25, 0.5 and 1 core (`chaos selftest neighbour`, always on), in rounds, the levels in a shuffled order each
round (seeded) so that a drift of the box does not line up with a level. For each run: the host's "others" (CPU
used by processes outside the run, cores) over its load, and the E2E P50 of each phase. Prints each level's
others and its P50 against the quiet runs', phase by phase (ratio of geometric means), and the slope: the
slowdown per core of others, fitted on log P50.

Usage: python bench/host_slowdown.py [--rounds 3] [--levels 0,0.25,0.5,1] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARS = ["PRESET=tiny-long", "LOAD_FOR=16s", "FAULT_AT=4s", "FLAKY_AT=11s", "FLAKY_FOR=3s"]


def run(level: float, out: str) -> dict:
    neighbour = None
    if level > 0:
        neighbour = subprocess.Popen([sys.executable, "-m", "chaos", "selftest", "neighbour", "--cores", str(level),
                                      "--for", "600s", "--on", "600s-600s", "--start", "on"], cwd=ROOT,
                                     stdout=subprocess.DEVNULL)
        time.sleep(1.0)
    try:
        cmd = [sys.executable, "-m", "chaos", "run", "experiments/upgrade-check.yaml", "--out", out]
        for v in VARS:
            cmd += ["--var", v]
        subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        if neighbour is not None:
            neighbour.send_signal(signal.SIGTERM)
            neighbour.wait(30)
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    return {"level": level, "others": rep["host"]["load"]["others"],
            "p50": {p["name"]: p["e2e"]["p50"]["value"] for p in rep["phases"] if p["e2e"]["p50"]["value"]}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--levels", default="0,0.25,0.5,1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "host-slowdown"))
    a = p.parse_args()
    levels = [float(x) for x in a.levels.split(",")]
    root = os.path.join(a.out, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    rng = random.Random(a.seed)
    rows = []
    for r in range(a.rounds):
        order = levels[:]
        rng.shuffle(order)
        for level in order:
            row = run(level, os.path.join(root, f"r{r}-{level:g}"))
            rows.append(row)
            print(f"round {r + 1} neighbour {level:g}: others {row['others']:.2f} cores, E2E P50 "
                  + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in row["p50"].items()), flush=True)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "results.json"), "w") as f:
        json.dump({"args": vars(a), "rows": rows}, f, indent=2)
    phases = list(rows[0]["p50"])
    quiet = [r for r in rows if r["level"] == 0]
    print("\n| neighbour | others (cores) | " + " | ".join(f"{ph} P50 vs quiet" for ph in phases) + " |")
    print("|---|---|" + "---|" * len(phases))
    for level in levels:
        mine = [r for r in rows if r["level"] == level]
        cells = []
        for ph in phases:
            q = [math.log(r["p50"][ph]) for r in quiet if ph in r["p50"]]
            m = [math.log(r["p50"][ph]) for r in mine if ph in r["p50"]]
            cells.append(f"×{math.exp(np.mean(m) - np.mean(q)):.2f}" if q and m else "-")
        print(f"| {level:g} | {np.mean([r['others'] for r in mine]):.2f} | " + " | ".join(cells) + " |")
    x = np.array([r["others"] for r in rows for ph in phases if ph in r["p50"]])
    y = np.array([math.log(r["p50"][ph]) for r in rows for ph in phases if ph in r["p50"]])
    g = np.array([phases.index(ph) for r in rows for ph in phases if ph in r["p50"]])
    # one intercept a phase, one slope: log P50 = a_phase + b * others
    design = np.column_stack([x] + [(g == i).astype(float) for i in range(len(phases))])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    print(f"\nslowdown per core of others: x{math.exp(coef[0]):.2f} (log slope {coef[0]:.3f}); a quarter core: "
          f"x{math.exp(coef[0] * 0.25):.3f}; run-to-run spread of a phase's log P50 at a level: "
          f"{np.std(resid, ddof=len(coef)):.3f}")
    print(f"results: {os.path.join(root, 'results.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
