"""The figures made for what canary analysis misses (chaos/gate/tails.py, chaos/gate/rare.py), on seeded synthetic
pairs with a known truth: each calls "worse" for the change it is made for, through judge() with every other figure
of the gate (Holm over all of them); and in A/A gates (the candidate is the baseline) its false-alarm rate is at
most alpha, asserted with a binomial interval over many seeded gates."""

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from chaos.gate.figures import GateSettings
from chaos.gate.judge import judge
from chaos.gate.pairs import Pair, Run, experiment_figures
from chaos.gate.rare import episodes, rare_error_figure
from chaos.gate.tails import spread_figures, tail_share_figure
from chaos.records import RequestRecord
from chaos.verify import compare as C

T0 = 1_800_000_000.0
PHASES = (("steady state", "steady", 0.0, 10.0), ("after recovery", "after", 10.0, 20.0))
S = GateSettings()
ALPHA = 1 - S.confidence
GATES = 120  # A/A gates a figure's false-alarm rate is counted over


def make_run(rng, t0, stall=0.0, spread=0.0, errors=0.0, rate=15) -> Run:
    """20 s of load: each request 12 tokens, its gaps log-normal around 20 ms x the run's own pace (runs differ by
    ~10 %, as short runs on a shared box do). stall: the share of requests one of whose gaps waits 300 ms more;
    spread: the log-sd of a pace factor per request, max(1, e^(spread Z)); errors: the share failing with 500."""
    pace = rng.lognormal(0, 0.1)
    recs = []
    for i, s in enumerate(np.sort(rng.uniform(0, 20, rate * 20))):
        factor = max(1.0, math.exp(spread * rng.normal())) if spread else 1.0
        gaps = rng.lognormal(math.log(0.02 * pace), 0.15, 11) * factor
        if rng.random() < stall:
            gaps[rng.integers(11)] += 0.3
        ttft = 0.05 * pace * factor * rng.lognormal(0, 0.1)
        e2e = ttft + float(gaps.sum())
        failed = rng.random() < errors
        recs.append(RequestRecord(id=f"r{i}", case="chat", endpoint="chat", stream=True, t_sched=t0 + s,
                                  t_start=t0 + s, t_first=None if failed else t0 + s + ttft, t_end=t0 + s + e2e,
                                  status=500 if failed else 200, outcome="http_error" if failed else "ok",
                                  itl_us=[] if failed else [int(g * 1e6) for g in gaps]))
    report = {"exit_code": 0, "load_started": t0,
              "phases": [{"name": n, "kind": k, "start": t0 + a, "end": t0 + b} for n, k, a, b in PHASES]}
    return Run(f"/runs/x-{t0}", report, recs)


def make_pairs(seed, n=7, base_errors=0.0, rate=15, stall=0.0, spread=0.0, errors=None) -> list[Pair]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(1, n + 1):
        a = make_run(rng, T0 + 100 * k, errors=base_errors, rate=rate)
        b = make_run(rng, T0 + 100 * k + 50, errors=base_errors if errors is None else errors, stall=stall,
                     spread=spread, rate=rate)
        out.append(Pair(k, "ab" if rng.random() < 0.5 else "ba", a, b))
    return out


def verdicts(pairs) -> dict[str, dict]:
    return {f["figure"]: f for f in judge(experiment_figures("x", pairs, S), S.confidence)}


def test_a_tail_only_regression_is_caught_by_the_tail_share_and_not_by_the_median():
    v = verdicts(make_pairs(1, stall=0.05))
    tail = v["x · every phase E2E share beyond the other run's P95"]
    assert tail["verdict"] == C.WORSE, tail
    assert tail["b"]["value"] > 2 * tail["a"]["value"] and tail["difference"]["low"] > 0
    assert all(v[f"x · {p} E2E p50"]["verdict"] != C.WORSE for p, *_ in PHASES)  # the median is untouched


def test_a_wider_spread_at_the_median_is_caught_by_the_itl_spread():
    v = verdicts(make_pairs(2, spread=0.5))
    spread = [v[f"x · {p} ITL spread (log P75/P25)"] for p, *_ in PHASES]
    assert all(f["verdict"] == C.WORSE for f in spread), spread
    assert all(f["ratio"]["low"] > 1.1 for f in spread)


def test_a_slower_build_everywhere_moves_no_spread():
    """Scale-free: 1.5x every gap is a latency regression, not a wider spread."""
    pairs = make_pairs(3)
    for p in pairs:
        for r in p.b.records:
            r.itl_us = [int(g * 1.5) for g in r.itl_us]
    assert all(f["verdict"] != C.WORSE for f in judge(spread_figures("x", pairs, S), S.confidence))


def test_rare_errors_where_the_baseline_fails_none_are_caught_exactly():
    # 7 pairs of 500 requests at 0.5 %: ~17 failures, all the candidate's: p = 2 (1/2)^17 passes Holm over the
    # gate's 21 figures. (The resolution: 0 of 0 against k of k needs 2 m / alpha < 2^k, 10-12 failures for a gate
    # of 20-60 figures, so about 2,000 candidate requests at 0.5 %.)
    v = verdicts(make_pairs(4, errors=0.005, rate=25))
    rare = v["x · every phase rare errors (failure episodes, exact)"]
    assert rare["exact"]["failures"]["a"] == 0 and rare["exact"]["failures"]["b"] >= 12
    assert rare["verdict"] == C.WORSE, rare
    assert rare["a"]["value"] == 0 and rare["b"]["low"] > 0 and rare["rate_ratio"]["high"] is None
    assert rare["rate_ratio"]["low"] > 1
    assert all(v[f"x · {p} error rate"]["verdict"] != C.WORSE for p, *_ in PHASES)  # a point's tolerance hides it


def test_a_burst_of_failures_counts_once():
    recs = [RequestRecord(id=str(i), case="chat", endpoint="chat", stream=True, t_sched=T0, t_start=T0,
                          t_end=T0 + 0.1 * i if i < 4 else T0 + 10 * i, status=500, outcome="http_error")
            for i in range(6)]
    recs.append(RequestRecord(id="c", case="chat", endpoint="chat", stream=True, t_sched=T0, t_start=T0,
                              outcome="cancelled"))
    assert episodes(recs) == (3, 6)


@pytest.mark.slow  # 120 seeded gates a figure: the whole suite's, not the unit tier's
@pytest.mark.parametrize("build,change", [(tail_share_figure, {}), (spread_figures, {}),
                                           (rare_error_figure, {"base_errors": 0.01})],
                         ids=["tail share", "ITL spread", "rare errors"])
def test_a_no_change_gate_alarms_at_most_alpha_of_the_time(build, change):
    worse = changed = judged = 0
    for seed in range(GATES):
        figs = build("x", make_pairs(1000 + seed, n=7, rate=8, **change), S)
        for f in judge(figs if isinstance(figs, list) else [figs], S.confidence):
            judged += 1
            worse += f["verdict"] == C.WORSE
            changed += f["p_changed"] is not None and f["p_changed"] <= ALPHA
    # the figure alone (Holm over one): its false alarms, and its "changed" test's, within alpha
    for k in (worse, changed):
        assert binomtest(k, judged).proportion_ci(0.99).low <= ALPHA, (k, judged)
    assert worse <= changed
