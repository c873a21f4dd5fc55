"""The sequential gate's design (chaos/gate/sequential.py): its looks, what a look decides, and its error rates on
seeded synthetic pairs with known truth, each asserted with its own exact binomial interval."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from chaos.gate.sequential import WITHIN, Design, looks, settle, simulate, update
from chaos.verify import compare as C

TOLERANCE = math.log(1.10)  # the gate's default 10 %, as a log ratio
SD = 0.16  # a pair's log-ratio spread on this box (docs/gate.md, BENCHMARKS.md §15)


def test_looks_grow_by_about_two_fifths_from_the_fewest_pairs_a_decision_needs():
    assert looks(5, 20) == (5, 7, 10, 14, 20)
    assert looks(5, 5) == (5,)
    d = Design.plan(0.95, 14)
    assert d.looks == (5, 7, 10, 14) and d.alpha_at(0) == pytest.approx(0.05 / 4)
    assert d.beta_at(3) == pytest.approx(0.2 / 4) and d.look_at(10) == 2 and d.look_at(11) is None
    assert len(Design.plan(0.95, 50).looks) <= 8  # at most 8 looks, the first and the last kept
    with pytest.raises(ValueError, match="needs 5 pairs"):
        Design.plan(0.95, 4)
    with pytest.raises(ValueError, match="rise"):
        Design((7, 5), 0.05, 0.2)


def _fig(name, d, allowed=TOLERANCE, verdict=C.SAME, **kw):
    return {"figure": name, "experiment": "e", "kind": "latency", "pairs": list(range(1, len(d) + 1)), "d": d,
            "allowed": allowed, "verdict": verdict, "p_value": 0.001 if verdict == C.WORSE else 0.5, **kw}


def test_a_look_calls_worse_decides_within_and_leaves_the_rest_open():
    design = Design.plan(0.95, 14)
    decided = {}
    flat = [0.0, 0.01, -0.01, 0.02, -0.02]  # every pair well below the 10 % allowed: p = 1/32 <= 0.2 / 4
    noisy = [0.3, -0.2, 0.1, -0.1, 0.25]
    still = update(decided, [_fig("w", [0.5] * 5, verdict=C.WORSE), _fig("flat", flat), _fig("noisy", noisy),
                             _fig("aborted", [0] * 5, allowed=0, kind="aborted")], design, 0, 5)
    assert [f["figure"] for f in still] == ["noisy"]  # aborted never holds the gate: the last look judges it
    assert decided["w"]["verdict"] == C.WORSE and decided["flat"] == {"verdict": WITHIN, "pairs": 5, "p": 1 / 32}
    final = settle([_fig("w", [0.5] * 5), _fig("flat", flat, verdict=C.NOT_JUDGED, why="5 pairs", needs_pairs=7),
                    _fig("noisy", noisy)], decided)
    assert [f["verdict"] for f in final] == [C.WORSE, C.SAME, C.SAME]
    assert final[1]["within"] and "why" not in final[1] and "needs_pairs" not in final[1]  # decided at its look
    assert [f["decided"] for f in final] == [True, True, False]


def test_a_pair_whose_baseline_saw_the_busier_host_cannot_make_within_easier():
    design = Design.plan(0.95, 14)
    decided = {}
    # pair 5's baseline run was busier beyond the bound (gap < 0): the candidate looks better there; without it,
    # four pairs reach at best p = 1/16 > 0.05: not decided yet
    f = _fig("f", [0.0, 0.0, 0.0, 0.0, -0.5], excluded={"host": {5: "b busier"}}, gap=[0, 0, 0, 0, -0.6])
    assert [x["figure"] for x in update(decided, [f], design, 0, 5)] == ["f"] and not decided


def _rates(effect, gates, figures=3, max_pairs=10, seed=1):
    design, rng = Design.plan(0.95, max_pairs), np.random.default_rng(seed)
    pairs, alarms, within, n_figs = [], 0, 0, 0
    for _ in range(gates):
        n, figs = simulate(design, [effect] * figures, SD, TOLERANCE, rng)
        pairs.append(n)
        alarms += any(f["verdict"] == C.WORSE for f in figs)
        within += sum(bool(f.get("within")) for f in figs)
        n_figs += len(figs)
    return np.mean(pairs), binomtest(alarms, gates), binomtest(within, n_figs)


@pytest.mark.slow
def test_error_rates_on_synthetic_pairs_with_known_truth():
    # no change: a false alarm in at most alpha of gates (the union bound over the looks)
    mean_pairs, alarms, within = _rates(0.0, 80)
    assert alarms.proportion_ci().high <= 0.05, alarms
    assert within.k / within.n > 0.5  # most figures are shown within the tolerance by 10 pairs
    # a change of exactly the tolerance: decided "within" for at most beta (0.2) of figures
    _, _, within = _rates(TOLERANCE, 80, seed=2)
    assert within.proportion_ci().high <= 0.2, within
    # a change of 25 %: every gate calls it, in fewer pairs than the maximum on average
    mean_pairs, alarms, _ = _rates(math.log(1.25), 40, seed=3)
    assert alarms.proportion_ci().low >= 0.9 and mean_pairs < 10, (alarms, mean_pairs)


def test_a_gate_that_stops_at_its_first_look_is_not_inconclusive_for_runs_that_never_aborted():
    # at 5 pairs a look's alpha (0.0125) needs 7 pairs to judge anything: the aborted figure, which no look decides,
    # would be "too few pairs" and make the gate exit 4, though no run aborted
    aborted = _fig("aborted", [0.0] * 5, allowed=0, kind="aborted", verdict=C.NOT_JUDGED, why="5 pairs",
                   needs_pairs=7)
    some = _fig("some", [0.0, 1.0, 0.0, 0.0, 0.0], allowed=0, kind="aborted", verdict=C.NOT_JUDGED, needs_pairs=7)
    quiet, noisy = settle([aborted, some], {})
    assert quiet["verdict"] == C.SAME and "needs_pairs" not in quiet and quiet["why"] == "no run aborted"
    assert noisy["verdict"] == C.NOT_JUDGED and noisy["needs_pairs"] == 7  # a run aborted: the gate says so
