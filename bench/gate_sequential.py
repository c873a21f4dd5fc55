"""The sequential gate's operating characteristics (chaos/gate/sequential.py) beside the fixed design, on seeded
synthetic pairs: how many pairs a decision takes, how often a gate calls a regression, and how many figures are
shown within the tolerance, at no change, at the tolerance and beyond it.

Each gate has --figures figures; each figure's pair changes are drawn from normal(effect, --sd) on the log scale
(0.16: a pair's spread of a phase's P50 on this 2-core box, BENCHMARKS.md §15), the tolerance is 10 %. The fixed
design is `chaos gate --pairs 7` (one look, all of alpha there); the sequential ones are `--max-pairs 14` and
`--max-pairs 20`. Real gates judge ~40 figures of mixed kinds, with Holm over all of them: this is the design
alone, its rates exact for these synthetic figures (every decision is the gate's own code, chaos.gate.judge).

    python bench/gate_sequential.py                 # ~4 min on 2 cores
    python bench/gate_sequential.py --gates 200     # tighter rates
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from scipy.stats import binomtest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench._table import print_table  # noqa: E402
from chaos.gate.sequential import Design, simulate  # noqa: E402
from chaos.verify import compare as C  # noqa: E402


def ci(k: int, n: int) -> str:
    c = binomtest(k, n).proportion_ci()
    return f"{100 * k / n:.0f} % [{100 * c.low:.0f}, {100 * c.high:.0f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gates", type=int, default=60)
    ap.add_argument("--figures", type=int, default=5)
    ap.add_argument("--sd", type=float, default=0.16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    tol = math.log(1.10)
    designs = {"fixed, --pairs 7": Design((7,), 0.05, 0.2), "--max-pairs 14": Design.plan(0.95, 14),
               "--max-pairs 20": Design.plan(0.95, 20)}
    rows = []
    t0 = time.monotonic()
    for label, effect in (("no change", 0.0), ("+10 % (the tolerance)", tol), ("+25 %", math.log(1.25)),
                          ("+50 %", math.log(1.5))):
        for name, design in designs.items():
            rng = np.random.default_rng(a.seed)
            pairs, alarms, within = [], 0, 0
            for _ in range(a.gates):
                n, figs = simulate(design, [effect] * a.figures, a.sd, tol, rng)
                pairs.append(n)
                alarms += any(f["verdict"] == C.WORSE for f in figs)
                within += sum(bool(f.get("within")) for f in figs)
            rows.append([label, name, float(np.mean(pairs)), 2 * float(np.mean(pairs)), ci(alarms, a.gates),
                         ci(within, a.gates * a.figures)])
        print(f"  {label}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    print(f"{a.gates} gates a row, {a.figures} figures a gate, pair sd {a.sd} (log), tolerance 10 %, alpha 5 %, "
          f"power 80 % at the tolerance; [95 % Clopper-Pearson]")
    print_table(["truth", "design", "pairs (mean)", "runs (mean)", "gates calling worse", "figures within"], rows,
                "llrrrr")


if __name__ == "__main__":
    main()
