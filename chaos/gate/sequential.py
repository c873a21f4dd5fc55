"""Sequential pairs: run pairs until every figure is decided, or the maximum is reached (`chaos gate --max-pairs`).

The design is group-sequential with its error spent evenly over a few looks (Bonferroni over the looks):

- looks at 5, 7, 10, 14, 20 ... pairs (each about 1.4 times the last, from the fewest a sign-flip test needs at
  the gate's confidence), up to --max-pairs;
- at look k of L, every figure is judged by the fixed gate's own tests (paired t, Holm over every figure, and the
  sign-flip test beyond the tolerance: chaos.gate.judge) at alpha / L: a figure "worse" there is called, and
  stays called;
- a figure not worse is decided "within the tolerance" when the sign-flip test of "its change is below the
  allowed change" rejects at beta / L: the pairs exclude a change as large as the tolerance;
- between the two, another round of pairs runs, for the experiments that still have an open figure; once a
  figure is called worse the gate stops (its verdict is made) and lists the figures still open.

Why this design. Every look is a complete test of the kind the fixed gate already proves; the union bound makes
the whole procedure's false-alarm chance at most the sum of the looks' alphas, alpha, whatever the looks saw
(no independence or normality between looks is assumed), and the chance of deciding "within" a figure whose true
change is the tolerance at most beta (power 1 - beta at the tolerance). An always-valid mSPRT would look after
every pair, but its mixture needs a variance model per figure that a gate of ~40 mixed figures (log ratios,
counts, rates) does not have; Pinpoint's two thresholds have no stated error rate. The cost of spending evenly is
power at the first looks; tests/gate/test_sequential.py measures all three rates on seeded synthetic pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..verify import compare as C
from ..verify.paired import flip_p, min_pairs

WITHIN = "within the tolerance"  # a decided figure: its pairs exclude a change as large as the tolerance
GROWTH = 1.4  # each look about this many times the pairs of the last
MAX_LOOKS = 8


def looks(first: int, last: int) -> tuple[int, ...]:
    """The pairs at which figures are judged: first, then ~GROWTH times more each time, and last."""
    out = [first]
    while out[-1] < last:
        out.append(min(last, max(out[-1] + 1, math.ceil(out[-1] * GROWTH))))
    return tuple(out)


@dataclass(slots=True, frozen=True)
class Design:
    """When the gate looks and what each look may spend. alpha: the whole procedure's false-alarm bound (1 -
    confidence); beta: its bound on deciding "within the tolerance" a figure whose change is the tolerance."""

    looks: tuple[int, ...]
    alpha: float
    beta: float

    def __post_init__(self):
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 2:
            raise ValueError(f"looks must rise from 2 pairs or more: {self.looks}")
        if len(self.looks) > MAX_LOOKS:
            raise ValueError(f"{len(self.looks)} looks: at most {MAX_LOOKS} (each spends alpha / looks)")
        if not (0 < self.alpha < 0.5 and 0 < self.beta < 0.5):
            raise ValueError(f"alpha ({self.alpha}) and beta ({self.beta}) must be in (0, 0.5)")

    @classmethod
    def plan(cls, confidence: float, max_pairs: int, power: float = 0.8) -> Design:
        first = min_pairs(confidence)
        if max_pairs < first:
            raise ValueError(f"--max-pairs {max_pairs}: a decision at {confidence:.0%} needs {first} pairs or more")
        all_looks = looks(first, max_pairs)
        if len(all_looks) > MAX_LOOKS:  # keep the last looks: the early ones decide little at alpha / MAX_LOOKS
            all_looks = (first, *all_looks[-(MAX_LOOKS - 1):])
        return cls(all_looks, 1 - confidence, 1 - power)

    @property
    def max_pairs(self) -> int:
        return self.looks[-1]

    def alpha_at(self, look: int) -> float:
        return self.alpha / len(self.looks)

    def beta_at(self, look: int) -> float:
        return self.beta / len(self.looks)

    def look_at(self, pairs: int) -> int | None:
        """The look's index when this many pairs are done, else None."""
        return self.looks.index(pairs) if pairs in self.looks else None


def within_p(f: dict, seed: int = 0) -> float:
    """One-sided p of "the figure's change is below its allowed change", by the sign-flip test of (allowed - d)
    (exact: the coins make the signs exchangeable at the tolerance). A pair whose baseline run saw more of others'
    CPU beyond the bound is left out: it can only make the candidate look better, and so "within" easier."""
    host = (f.get("excluded") or {}).get("host") or {}
    gap = dict(zip(f["pairs"], f.get("gap") or [None] * len(f["pairs"])))
    baseline_busier = {n for n in host if (gap.get(n) or 0) <= 0}
    d = [v for p, v in zip(f["pairs"], f["d"]) if p not in baseline_busier]
    if not d:
        return 1.0
    return flip_p([f["allowed"] - v for v in d], seed)


def blocks(f: dict) -> bool:
    """Can more pairs decide this figure? Not one no client could time (more pairs time nothing), nor whether a
    run aborted (0 allowed: no test could show it within), which the last look judges as the fixed gate does."""
    ex = f.get("excluded") or {}
    return f.get("kind") != "aborted" and not ex.get("unseen")


def update(decided: dict[str, dict], judged: list[dict], design: Design, look: int, pairs: int,
           seed: int = 0) -> list[dict]:
    """After look `look` (judged: every figure of the gate, judged at design.alpha_at(look)), record the newly
    decided figures in `decided` (name -> {verdict, pairs, p}); returns the figures still open."""
    beta = design.beta_at(look)
    still = []
    for f in judged:
        name = f["figure"]
        if name in decided or not blocks(f):
            continue
        if f["verdict"] == C.WORSE:
            decided[name] = {"verdict": C.WORSE, "pairs": pairs, "p": f["p_value"]}
        elif not f.get("host") and (p := within_p(f, seed)) <= beta:  # held for the host: more pairs may tell
            decided[name] = {"verdict": WITHIN, "pairs": pairs, "p": p}
        else:
            still.append(f)
    return still


def settle(judged: list[dict], decided: dict[str, dict]) -> list[dict]:
    """The final figures: a figure decided at a look keeps that look's verdict (and says at how many pairs);
    a "within" counts as no change for the gate's decision."""
    out = []
    for f in judged:
        d = decided.get(f["figure"])
        if d is None and f.get("kind") == "aborted" and f["verdict"] == C.NOT_JUDGED and not any(f["d"]):
            # no run of either side aborted: nothing to judge, at any number of pairs (a look's stricter alpha
            # needs more pairs than the gate may have run: that must not make a quiet gate inconclusive)
            f = {k: v for k, v in f.items() if k not in ("why", "needs_pairs")}
            out.append({**f, "verdict": C.SAME, "decided": True, "why": "no run aborted"})
        elif d is None:
            out.append({**f, "decided": False})
        elif d["verdict"] == C.WORSE:
            out.append({**f, "verdict": C.WORSE, "decided": True, "decided_at": d["pairs"], "p_value": d["p"]})
        else:
            f = {k: v for k, v in f.items() if k not in ("why", "needs_pairs")}  # judged at the look, not now
            out.append({**f, "verdict": f["verdict"] if f["verdict"] == C.BETTER else C.SAME, "decided": True,
                        "decided_at": d["pairs"], "within": True, "p_within": d["p"]})
    return out


def simulate(design: Design, effects: list[float], sd: float, allowed: float, rng, seed: int = 0) -> tuple[int, list]:
    """One gate of the design on synthetic pairs (its operating characteristics: bench/gate_sequential.py, the
    tests): each figure's pair changes drawn from normal(effect, sd) on the log scale. Returns the pairs it ran
    and its settled figures."""
    from .judge import judge

    data = {f"f{i}": rng.normal(e, sd, design.max_pairs) for i, e in enumerate(effects)}

    def figs(n: int) -> list[dict]:
        return [{"figure": name, "experiment": "sim", "kind": "latency", "metric": "e2e p50",
                 "pairs": list(range(1, n + 1)), "d": list(d[:n]), "z": list(d[:n]), "allowed": allowed}
                for name, d in data.items()]

    decided: dict[str, dict] = {}
    for look, n in enumerate(design.looks):
        still = update(decided, judge(figs(n), 1 - design.alpha_at(look), seed), design, look, n, seed)
        if not still or any(d["verdict"] == C.WORSE for d in decided.values()):
            break
    return n, settle(judge(figs(n), 1 - design.alpha_at(look), seed), decided)
