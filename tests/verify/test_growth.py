"""The latency-growth fit and knee on synthetic records: a linear target passes, one that breaks past a size fails
with the knee at that size, a short or noisy run is not judged."""

import random

import pytest

from chaos.records import RequestRecord
from chaos.verify.spec import Growth
from chaos.verify.growth import analyse, growth_check, knee, step_ratios

SIZES = [1000, 2000, 4000, 8000, 16000]
LOAD = {"input_tokens": SIZES, "seed": 0}


def records(latency, per_size=20, noise=0.05, seed=1, sizes=SIZES, outcome="ok"):
    """per_size requests of each size, interleaved in time, TTFT latency(n) with multiplicative noise; decode adds
    a fixed 20 ms to E2E."""
    rng = random.Random(seed)
    out, t = [], 1000.0
    for i in range(per_size):
        for n in rng.sample(sizes, len(sizes)):
            ttft = latency(n) * (1 + rng.uniform(-noise, noise))
            out.append(RequestRecord(id=f"{i}-{n}", case="long", endpoint="chat", stream=True, t_sched=t, t_start=t,
                                     t_first=t + ttft, t_end=t + ttft + 0.02, status=200, outcome=outcome,
                                     input_tokens=n))
            t += ttft + 0.03
    return out


def linear(n):
    return 0.03 + 0.1e-3 * n  # 30 ms + 0.1 ms a token


def breaks_at_8k(n):
    return linear(n) if n < 8000 else linear(n) + 4e-3 * (n - 4000)  # a cache limit past 4k: 4 ms a token more


def test_linear_growth_has_no_knee_and_passes():
    c = growth_check(records(linear), LOAD, Growth(metric="ttft", max_knee_ratio=3.0))
    assert c.passed is True, c.detail
    g = c.growth
    assert g["knee_tokens"] is None
    fit = g["fits"]["ttft"]
    assert fit["slope_ms_per_1k_tokens"] == pytest.approx(100, rel=0.1)  # 0.1 ms a token
    assert fit["intercept_ms"] == pytest.approx(30, abs=15)
    assert fit["r2"] > 0.99
    assert fit["exponent"] < 1.05
    assert all(r < 1.5 for r in g["step_ratios"]), g["step_ratios"]
    assert [row["input_tokens"] for row in g["sizes"]] == SIZES
    assert all(row["sent"] == row["ok"] == 20 for row in g["sizes"])
    assert g["sizes"][-1]["ttft_p50_s"] == pytest.approx(linear(16000), rel=0.05)
    assert "ms/1k tokens" in c.measured and "R² 0.99" in c.measured or "R² 1.000" in c.measured
    assert "knee none" in c.measured


def test_super_linear_past_a_size_has_its_knee_there_and_fails():
    c = growth_check(records(breaks_at_8k), LOAD, Growth(metric="ttft", max_knee_ratio=3.0))
    assert c.passed is False, c.detail
    assert c.growth["knee_tokens"] == 8000
    assert "knee at 8000 tokens" in c.measured
    assert "8000 tokens" in c.detail
    # the same curve judged on E2E (TTFT + a fixed decode) finds the same knee
    assert growth_check(records(breaks_at_8k), LOAD, Growth(metric="e2e")).growth["knee_tokens"] == 8000


def test_smooth_quadratic_stays_under_three_but_not_under_two():
    """The rule's scale: a pure n² with doubling sizes steps 2-2.6x its base line; a bound of 2 flags it."""
    quad = [(n / 1000) ** 2 for n in SIZES]
    assert max(step_ratios(SIZES, quad)) < 3
    assert knee(SIZES, quad, 3.0) is None
    assert knee(SIZES, quad, 2.0) is not None
    assert knee(SIZES, [linear(n) for n in SIZES], 1.2) is None


def test_too_few_requests_at_a_size_is_not_judged():
    recs = [r for r in records(linear) if r.input_tokens != 16000 or r.id.startswith(("0-", "1-", "2-"))]
    c = growth_check(recs, LOAD, Growth(min_requests=8))
    assert c.passed is None
    assert "too few requests sent at 16000" in c.detail
    assert c.growth["sizes"][-1]["sent"] == 3


def test_few_sent_because_they_failed_fails():
    """A size whose few requests timed out (a hang holds the one user) is the target's failure, not too short a run."""
    recs = [r for r in records(linear) if r.input_tokens != 16000 or r.id.startswith(("0-", "1-"))]
    for r in recs:
        if r.input_tokens == 16000:
            r.outcome, r.t_first, r.t_end, r.status, r.timeout_kind = "timeout", None, r.t_start + 60, None, "total"
    c = growth_check(recs, LOAD, Growth())
    assert c.passed is False and "16000 (2 of 2 failed)" in c.detail, c.detail


def test_sent_but_unanswered_fails():
    recs = records(linear)
    for r in recs:
        if r.input_tokens == 16000:
            r.outcome, r.t_first, r.t_end, r.status = "http_error", None, r.t_start + 0.01, 500
    c = growth_check(recs, LOAD, Growth())
    assert c.passed is False
    assert "answered too few" in c.detail and "16000 (0 of 20)" in c.detail


def test_noise_that_hides_the_answer_is_not_judged():
    """A mild break seen through heavy noise (a busy machine) is neither passed nor failed."""
    def mild(n):
        return linear(n) + (0.3e-3 * (n - 8000) if n > 8000 else 0)  # the last step 4x its base line

    verdicts = [growth_check(records(mild, per_size=10, noise=0.9, seed=s), LOAD, Growth()).passed for s in range(6)]
    assert None in verdicts, verdicts
    assert True not in verdicts, "noise never makes a knee pass"
    # and the same break without noise is a clear failure
    assert growth_check(records(mild, noise=0.02), LOAD, Growth(max_knee_ratio=3.0)).passed is False


def test_a_range_instead_of_sizes_is_not_judged():
    c = growth_check(records(linear), {"input_tokens": "1000-16000"}, Growth())
    assert c.passed is None and "not a list of sizes" in c.detail


def test_estimated_counts_go_to_the_nearest_size():
    recs = records(linear)
    for r in recs:
        r.input_tokens += 7  # an estimating tokenizer rounds
    a = analyse(recs, SIZES)
    assert [row["sent"] for row in a["sizes"]] == [20] * 5


def test_input_tokens_as_sizes_round_trip_and_interleave():
    """load.input_tokens as sizes: the list, the text form (two sizes too) and what the load driver hands its
    Locust processes (list(spec.input_tokens)) all give the same sizes; every run of len(sizes) requests takes each
    size once; a range and a single size still work as before."""
    from collections import Counter

    from chaos.load.workloads import Workload, WorkloadSpec, sizes

    for written, want in (([4000, 1000, 2000], (1000, 2000, 4000)), ("1000,16000", (1000, 16000)),
                          ("1000, 2000,4000", (1000, 2000, 4000))):
        spec = WorkloadSpec("long", input_tokens=written, output_tokens=4)
        assert sizes(spec.input_tokens) == want
        again = WorkloadSpec("long", input_tokens=list(spec.input_tokens), output_tokens=list(spec.output_tokens))
        assert sizes(again.input_tokens) == want, "the driver's round trip keeps the sizes"
    assert WorkloadSpec("long", input_tokens="200-500").input_tokens == (200, 500)
    assert WorkloadSpec("long", input_tokens=[200, 500]).input_tokens == (200, 500), "a pair is a range"
    assert WorkloadSpec("long", input_tokens=300).input_tokens == (300, 300)
    for bad in ("1000,0", [0, 5, 6], "a,b"):
        with pytest.raises(ValueError, match="list of sizes"):
            WorkloadSpec("long", input_tokens=bad)
    with pytest.raises(ValueError, match="output_tokens"):
        WorkloadSpec("long", output_tokens="8,16,32")

    w = Workload([(WorkloadSpec("long", input_tokens=SIZES, output_tokens=4), 1.0)], seed=7)
    got = [w.request(i).input_tokens for i in range(50)]
    for i in range(0, 50, 5):
        assert sorted(got[i:i + 5]) == SIZES
    assert got[:5] != got[5:10] or got[5:10] != got[10:15], "the order within each run is seeded, not fixed"
    assert Counter(got) == {n: 10 for n in SIZES}
    assert got == [Workload([(WorkloadSpec("long", input_tokens=SIZES, output_tokens=4), 1.0)], seed=7)
                   .request(i).input_tokens for i in range(50)], "the same seed sends the same sizes"
