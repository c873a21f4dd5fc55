"""Estimates with their noise: intervals cover the truth about as often as they claim, on known distributions, and
the sample counts an interval needs agree with first principles."""

import math

import numpy as np
import pytest
from scipy import stats as st

from chaos.verify.stats import (Estimate, bootstrap, min_point_samples, min_samples, percentile, percentiles,
                                proportion, rate, ratio_of_percentiles, resample_percentiles)


def test_p95_order_statistic_interval_covers_the_true_quantile_at_its_nominal_rate():
    # 2,000 seeded samples of n=400 from lognormal(0, 1); the true P95 is scipy's ppf. The equal-tailed interval's
    # exact coverage at n=400 is 96.2 % (the ranks are discrete, so >= 95 %); 2,000 runs add ~0.4 % of noise.
    rng = np.random.default_rng(7)
    true = st.lognorm.ppf(0.95, 1.0)
    covered = 0
    for row in rng.lognormal(0.0, 1.0, (2000, 400)):
        e = percentile(row, 95)
        covered += e.low <= true <= e.high
    assert 0.93 <= covered / 2000 <= 0.975


def test_point_values_are_numpys_linear_percentiles_and_intervals_bracket_them():
    x = np.random.default_rng(1).exponential(0.2, 1234)
    got = percentiles(x, (50, 95, 99, 99.9))
    for q, e in zip((50, 95, 99, 99.9), got.values()):
        assert e.value == pytest.approx(np.percentile(x, q), rel=1e-12)
        assert e.method == "order-statistic" and e.n == 1234
    for key in ("p50", "p95", "p99"):
        assert got[key].low <= got[key].value <= got[key].high
    assert got["p99.9"].low is None and got["p99.9"].needs == min_samples(99.9)  # 1234 is too few for P99.9


def test_ten_million_values_in_one_call():
    x = np.random.default_rng(2).random(10_000_000)
    got = percentiles(x)
    # Uniform(0, 1): the percentile is q/100, and 10M samples pin it to ~1e-3.
    for q in (50, 95, 99):
        e = got[f"p{q}"]
        assert e.low <= q / 100 <= e.high and e.high - e.low < 2e-3


def test_min_samples_for_p99_is_what_first_principles_say():
    # The interval needs a sample rank above the true P99 with probability >= 97.5 %: P(some value > xi_.99)
    # = 1 - 0.99^n >= 0.975 (the other tail, 1 - 0.01^n, is met long before).
    n = 1
    while 1 - 0.99 ** n < 0.975:
        n += 1
    assert min_samples(99, 0.95) == n
    assert percentile(np.arange(n - 1, dtype=float), 99).needs == n
    below = percentile(np.arange(n - 1, dtype=float), 99)
    assert below.low is None and below.high is None and below.value is not None
    at = percentile(np.arange(n, dtype=float), 99)
    assert at.low is not None and at.needs is None
    # The median's interval needs 0.5^n <= 0.025.
    assert min_samples(50) == next(k for k in range(1, 100) if 0.5 ** k <= 0.025)


def test_min_point_samples():
    assert min_point_samples(99) == 100 and min_point_samples(95) == 20 and min_point_samples(50) == 2
    assert min_point_samples(99.9) == 1000
    with pytest.raises(ValueError, match="percentile q"):
        min_point_samples(100)


def test_wilson_interval_coverage_at_a_low_error_rate():
    # Exact coverage (sum over every k of its binomial probability) for p = 0.02, n = 500: Wilson's is close to
    # nominal where the plain normal interval is not (it undercovers badly at small p).
    n, p = 500, 0.02
    pmf = st.binom.pmf(np.arange(n + 1), n, p)
    coverage = sum(pmf[k] for k in range(n + 1) if proportion(k, n).low <= p <= proportion(k, n).high)
    assert 0.93 <= coverage <= 0.975


def test_proportion_edges():
    e = proportion(0, 500)
    assert e.value == 0 and e.low == 0 and 0 < e.high < 0.01 and e.method == "wilson"
    assert proportion(500, 500).high == 1.0
    none = proportion(0, 0)
    assert none.value is None and none.low is None and none.needs == 1
    with pytest.raises(ValueError):
        proportion(3, 2)


@pytest.mark.parametrize("lam", [0.5, 3.0, 20.0, 150.0])
def test_poisson_interval_coverage(lam):
    # Garwood's interval is exact, so never below nominal; at small counts it is conservative.
    ks = np.arange(int(lam * 5 + 40))
    pmf = st.poisson.pmf(ks, lam)
    coverage = sum(pmf[k] for k in ks if rate(int(k), 2.0).low <= lam / 2 <= rate(int(k), 2.0).high)
    assert 0.95 <= coverage <= 0.995


def test_rate_is_per_second():
    e = rate(300, 10.0)
    assert e.value == 30.0 and e.low < 30 < e.high and e.method == "poisson"
    assert rate(0, 10.0).low == 0 and rate(5, 0).value is None


def test_resampled_percentiles_match_a_brute_force_bootstrap():
    # The order-statistic shortcut must give the same bootstrap distribution as resampling values.
    rng = np.random.default_rng(3)
    x = np.sort(rng.lognormal(0, 0.7, 300))
    fast = resample_percentiles(x, (50, 99), 20_000, np.random.default_rng(4))
    idx = rng.integers(0, x.size, (20_000, x.size))
    slow = np.percentile(x[idx], (50, 99), axis=1).T
    for j in range(2):
        for q in (2.5, 50, 97.5):
            assert np.percentile(fast[:, j], q) == pytest.approx(np.percentile(slow[:, j], q), rel=0.02)
    # Joint: P99 and P50 of one resample move together as they do in real resamples.
    assert np.corrcoef(fast.T)[0, 1] == pytest.approx(np.corrcoef(slow.T)[0, 1], abs=0.05)


def test_jitter_ratio_bootstrap_coverage_and_needs():
    # P99/P50 of lognormal(0, 0.5): 500 seeded samples of n=1000. The percentile bootstrap of a tail ratio is
    # a little liberal at small n (91.6 % at n=300 in our runs); at n=1000 it is near nominal.
    rng = np.random.default_rng(5)
    true = st.lognorm.ppf(0.99, 0.5) / st.lognorm.ppf(0.5, 0.5)
    covered = sum((e := ratio_of_percentiles(row, seed=i)).low <= true <= e.high
                  for i, row in enumerate(rng.lognormal(0, 0.5, (500, 1000))))
    assert 0.92 <= covered / 500 <= 0.985
    few = ratio_of_percentiles(rng.lognormal(0, 0.5, 60))
    assert few.low is None and few.needs == 100 and few.value > 1
    assert ratio_of_percentiles(np.arange(1.0, 501.0), seed=1) == ratio_of_percentiles(np.arange(1.0, 501.0), seed=1)


def test_generic_bootstrap_agrees_with_the_fast_ratio():
    x = np.random.default_rng(6).lognormal(0, 0.5, 2000)

    def ratio(a, axis):
        return np.percentile(a, 99, axis=axis) / np.percentile(a, 50, axis=axis)

    slow = bootstrap(x, ratio, resamples=2000, seed=1, method="percentile")
    fast = ratio_of_percentiles(x, resamples=2000, seed=1)
    assert slow.value == pytest.approx(fast.value)
    assert slow.low == pytest.approx(fast.low, rel=0.03) and slow.high == pytest.approx(fast.high, rel=0.03)
    assert bootstrap([1.0], np.mean).needs == 2


def test_estimate_round_trip_and_formatting():
    e = Estimate(0.512, 0.498, 0.530, 300, 0.95, "order-statistic")
    d = e.to_dict()
    assert d == {"value": 0.512, "low": 0.498, "high": 0.53, "n": 300, "confidence": 0.95,
                 "method": "order-statistic", "needs": None}
    assert Estimate.from_dict(d) == e
    ms = e.scaled(1000)
    assert ms.fmt(lambda v: f"{v:.0f} ms") == "512 ms [498–530] (n=300)"
    short = Estimate(0.512, None, None, 40, 0.95, "order-statistic", needs=368).scaled(1000)
    assert short.fmt(lambda v: f"{v:.0f} ms") == "512 ms (interval needs n>=368; n=40)"
    assert Estimate(None, n=0).fmt() == "n/a (n=0)"
    assert math.isclose(Estimate.from_dict({"value": 1.5}).value, 1.5)  # missing keys take defaults


def test_empty_and_non_finite_values():
    got = percentiles([])
    assert got["p50"].value is None and got["p50"].needs == min_samples(50)
    e = percentile([1.0, float("nan"), 2.0, float("inf"), 3.0], 50)
    assert e.value == 2.0 and e.n == 3
