"""The paired design's statistics (chaos.verify.paired), on synthetic pairs with a known truth (seeded):

- a no-change gate's false alarms stay at or under alpha, family-wise (paired t, Holm), with heavy tails and a
  neighbour that comes and goes on a schedule of its own; coins cancel a neighbour a fixed order cannot;
- a real change the pairs show is called, also an error rate up in every pair by very different amounts;
- intervals of times, counts and ratios never go below 0, and too few values say so instead.
"""

import math

import numpy as np
import pytest

from chaos.verify.compare import holm
from chaos.verify.paired import (flip_p, min_pairs, paired_t, patterns, positive_mean_interval, ratio_interval,
                                 studentized, t_interval)

ALPHA = 0.05


def test_min_pairs_is_what_the_patterns_can_resolve():
    assert min_pairs(0.95) == 5  # 1/32 <= 0.05 < 1/16
    assert min_pairs(0.99) == 7
    assert min_pairs(0.8) == 3


def test_patterns_enumerate_every_sign_once_identity_first():
    p = patterns(4)
    assert p.shape == (16, 4) and (p[0] == 1).all()
    assert len({tuple(r) for r in p}) == 16
    big = patterns(20, seed=1, cap=1024)
    assert big.shape == (1024, 20) and (big[0] == 1).all()


def test_studentized_rows_with_no_spread_are_infinite_by_sign():
    x = np.array([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    t = studentized(x)
    assert t[0] == math.inf and t[1] == -math.inf and t[2] == 0
    assert t[3] == pytest.approx(2 / (1 / math.sqrt(3)))


def test_flip_p_is_exact():
    assert flip_p([0.3, 0.2, 0.5, 0.1, 0.4]) == 1 / 32  # every pair agrees: only the identity reaches it
    assert flip_p([-0.3, -0.2, -0.5, -0.1, -0.4]) == 1.0
    # one pair of five against: the identity and the patterns that flip only smaller-or-equal pairs
    p = flip_p([0.5, 0.4, 0.3, 0.2, -0.1])
    assert 1 / 32 < p <= 3 / 32


def _timeline(rng, n, neighbour_share):
    """2n runs one after another; a neighbour switched on and off at random moments of its own (periods of 1-4
    runs), multiplying latency by 1.6 while on. Returns each run's slowdown, in log."""
    on, slow, t = rng.random() < 0.5, [], 0
    while t < 2 * n:
        length = rng.integers(1, 5)
        for _ in range(length):
            slow.append(math.log(1.6) if on and rng.random() < neighbour_share + 0.5 else 0.0)
        t += length
        on = not on
    return slow[:2 * n]


def _aa_gate(rng, n=7, figures=24, neighbour=True, run_sd=0.08):
    """One no-change gate: each pair's order by a coin; per figure, each run's log latency = the host's
    slowdown in its slot + a run effect shared by the run's figures + heavy-tailed noise of the figure."""
    slow = _timeline(rng, n, 0.3) if neighbour else [0.0] * (2 * n)
    orders = rng.random(n) < 0.5  # True: a first
    run_effect = rng.normal(0, run_sd, 2 * n)
    d = []
    for _ in range(figures):
        runs = np.array(slow) + run_effect + rng.standard_t(3, 2 * n) * 0.05
        a = np.where(orders, runs[0::2], runs[1::2])
        b = np.where(orders, runs[1::2], runs[0::2])
        d.append(b - a)
    return d


def _called(ds) -> list[bool]:
    """The gate's family test: paired t on each figure, Holm over them, at alpha."""
    p = [min(1.0, 2 * min(paired_t(d))) for d in ds]
    return [h <= ALPHA for h in holm(p)]


def test_paired_t_is_one_sided_each_way_and_certain_when_every_pair_agrees():
    up, down = paired_t([0.3, 0.25, 0.35, 0.3, 0.28])
    assert up < 1e-4 and down > 0.999
    assert paired_t([0.2] * 5) == (0.0, 1.0) and paired_t([0.0] * 5) == (1.0, 1.0)
    assert paired_t([0.4]) == (1.0, 1.0)


def test_no_change_false_alarms_stay_under_alpha_with_a_neighbour_that_comes_and_goes():
    rng = np.random.default_rng(7)
    trials = 400
    alarms = sum(any(_called(_aa_gate(rng))) for _ in range(trials))
    # at most alpha (Holm), less with heavy tails and a neighbour: 0.05 + 2.3 binomial standard errors
    assert alarms / trials <= ALPHA + 2.3 * math.sqrt(ALPHA * (1 - ALPHA) / trials), alarms


def _aligned(orders_a_first, slow_slots, rng, figures=24):
    """Pair differences when the host slows the runs in slow_slots (run positions 0..2n-1)."""
    n = len(orders_a_first)
    slow = np.array([math.log(1.6) if i in slow_slots else 0.0 for i in range(2 * n)])
    out = []
    for _ in range(figures):
        runs = slow + rng.normal(0, 0.03, 2 * n)
        a = np.where(orders_a_first, runs[0::2], runs[1::2])
        b = np.where(orders_a_first, runs[1::2], runs[0::2])
        out.append(b - a)
    return out


def test_coins_cancel_a_neighbour_that_fixed_alternation_cannot():
    """A neighbour busy in slots 1-2, 5-6, 9-10, ...: exactly the candidate's runs of the old a b b a order. With
    that fixed order every pair's difference says "slower", and the gate alarms every time; with each pair's order
    by a coin, the same neighbour falls on b or a at random, and alarms stay at alpha or under."""
    n, rng = 7, np.random.default_rng(5)
    slots = {i for i in range(2 * n) if i % 4 in (1, 2)}
    fixed = np.array([k % 2 == 0 for k in range(n)])  # a b, b a, a b, ...
    assert all(_called(_aligned(fixed, slots, rng)))
    trials = 300
    alarms = sum(any(_called(_aligned(rng.random(n) < 0.5, slots, rng))) for _ in range(trials))
    assert alarms / trials <= ALPHA + 2.3 * math.sqrt(ALPHA * (1 - ALPHA) / trials), alarms


def test_a_change_the_pairs_show_is_called():
    """A build 26 % slower in 8 of 24 figures, with pair differences spread ~7 % (a quiet box): caught (any figure
    called) in 90 of 100 gates or more, an unchanged figure called in 5 or fewer."""
    rng = np.random.default_rng(3)
    caught = wrong = 0
    for _ in range(100):
        ds = _aa_gate(rng, neighbour=False, run_sd=0.03)
        called = _called([d + (math.log(1.26) if j < 8 else 0) for j, d in enumerate(ds)])
        caught += any(called[:8])
        wrong += any(called[8:])
    assert caught >= 90 and wrong <= 5, (caught, wrong)


def test_an_error_rate_up_in_every_pair_by_very_different_amounts_is_called():
    """The gateway's retries off, as a bench gate measured it: 0 of ~300 failed in every baseline run, and 8 to 235
    of ~300 in the candidate's. On the log of the rate the pairs agree, and Holm over 40 figures (the other 39
    unchanged) still calls it; on the plain difference one wild pair hides it (t = 1.8)."""
    fails = [36, 34, 14, 31, 235, 8, 26]
    z = [math.log((k + 0.5) / 301) - math.log(0.5 / 301) for k in fails]
    rng = np.random.default_rng(2)
    assert _called([np.array(z)] + [rng.normal(0, 0.2, 7) for _ in range(39)])[0]
    plain = np.array(fails) / 300
    assert not _called([plain] + [rng.normal(0, 0.002, 7) for _ in range(39)])[0]


def test_t_interval_needs_three_values():
    assert t_interval([0.1, 0.2], 0.95) == (pytest.approx(0.15), None, None)
    m, lo, hi = t_interval([0.1, 0.2, 0.3], 0.95)
    assert lo < m < hi and m == pytest.approx(0.2)
    assert t_interval([], 0.95) == (None, None, None)


def test_a_ratio_interval_is_never_below_zero():
    r, lo, hi = ratio_interval(np.log([0.2, 3.0, 0.5, 4.0]), 0.95)
    assert 0 < lo < r < hi


@pytest.mark.parametrize("values", [
    [0.02, 0.05, 0.36],  # the "145 ms [-175 ms, 464 ms]": a mean of spread-out times
    [0.145, 0.9, 0.01, 0.02],
    [7.0, 7.1, 6.9],
])
def test_the_interval_of_a_mean_time_stays_above_zero(values):
    m, lo, hi, method = positive_mean_interval(values, 0.95)
    assert m == pytest.approx(np.mean(values))
    assert 0 < lo < hi and lo <= m <= hi and method == "log-normal (Cox)"


def test_a_time_of_zero_keeps_the_bound_at_zero_and_few_values_give_no_interval():
    m, lo, hi, method = positive_mean_interval([0.0, 0.4, 0.05], 0.95)
    assert lo == 0.0 and hi > m and "bounded at 0" in method
    assert positive_mean_interval([0.2, 0.3], 0.95) == (pytest.approx(0.25), None, None, "mean")


def test_cox_interval_covers_a_lognormal_mean():
    """Coverage on synthetic log-normal samples of 5 (known mean), about the stated 95 %."""
    rng = np.random.default_rng(11)
    mu, sigma = math.log(0.3), 0.8
    true = math.exp(mu + sigma ** 2 / 2)
    covered = 0
    for _ in range(1000):
        _, lo, hi, _ = positive_mean_interval(rng.lognormal(mu, sigma, 5), 0.95)
        covered += lo <= true <= hi
    assert 0.90 <= covered / 1000 <= 0.99
