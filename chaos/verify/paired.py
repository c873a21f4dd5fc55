"""Paired runs compared: the statistics of the gate's design (docs/gate.md, "Pairs in random order").

The design: n pairs of runs, baseline (a) and candidate (b), each pair's order drawn by a fair coin. For each
figure a pair gives one number: its change from a's run to b's (a latency percentile's log ratio, a recovery
time's or an error rate's difference), and the figure allows a change of c (the tolerance).

Why pairs in random order. Under "the candidate is the baseline" the two runs of a pair differ only by the moments
they ran at (the host then: a neighbour, a cache, a restart's timing), and which of those moments went to b was
the coin's choice: each pair's change is as likely to have come out with the other sign, whatever the host did.
A neighbour cannot line up with coins it does not know, so it adds noise to the pairs' changes, which the tests
below see, and no bias, which they could not.

Two tests, each answering its own question; the gate calls a figure worse when both do (docs/gate.md):
  - did it change at all, corrected over every figure of the gate? Student's t on the pairs' changes, on a scale
    where they are near normal (logs of times, of counts plus one, of rates), Holm over the figures (paired_t).
    With 7 pairs a p as small as 1e-5 is possible, which Holm over dozens of figures needs;
  - did it change by more than the tolerance? The sign-flip randomization test of the changes less c (flip_p):
    exact whatever their distribution, since the coins make every sign pattern equally likely under a change of
    exactly c, and conservative below it. Its resolution is 1/2^m on m pairs, so at 95 % a figure needs m >= 5.
Why not randomization for both: 7 pairs give 128 sign patterns, and a family of dozens of figures at 5 % has 6.4
of them to spend; a family-wise randomization test (max-T) then calls nothing but the most uniform changes, and
an error rate that went from 0 to 29 % in every pair, by very different amounts, was lost among the latency
figures (tests/verify/test_paired.py keeps that case).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

EXACT_UP_TO = 16  # pairs: 2^16 patterns enumerated; beyond, a seeded sample of that many


def min_pairs(confidence: float) -> int:
    """The fewest pairs whose 2^m sign patterns can reach p <= 1 - confidence."""
    return max(2, math.ceil(math.log2(1 / (1 - confidence))))


def patterns(n: int, seed: int = 0, cap: int = 1 << EXACT_UP_TO) -> np.ndarray:
    """Sign patterns over n pairs, the identity (all +1) first: every one of the 2^n while that is at most cap,
    else the identity and cap - 1 drawn at random (seeded)."""
    if n <= 0:
        return np.ones((1, 0))
    if 2 ** n <= cap:
        grid = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return grid  # product's first row is all +1
    rng = np.random.default_rng(seed)
    drawn = rng.choice((1.0, -1.0), size=(cap - 1, n))
    return np.vstack([np.ones((1, n)), drawn])


def studentized(x: np.ndarray) -> np.ndarray:
    """Row-wise one-sample t (mean / (sd / sqrt m)) of a patterns x m matrix. A row with no spread is +inf, -inf
    or 0 by its mean's sign: every pair agreeing exactly is the strongest evidence the pairs can give."""
    m = x.shape[1]
    mean = x.mean(axis=1)
    if m < 2:
        return np.sign(mean) * np.inf
    sd = x.std(axis=1, ddof=1)
    scale = np.abs(x).max(axis=1)
    flat = sd <= 1e-12 * np.maximum(scale, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mean / (sd / math.sqrt(m))
    t[flat] = np.where(mean[flat] > 0, np.inf, np.where(mean[flat] < 0, -np.inf, 0.0))
    return t


def paired_t(z) -> tuple[float, float]:
    """One-sided p-values (above 0, below 0) of the pairs' mean of z, by Student's t on m - 1 degrees of freedom.
    Every pair agreeing exactly (no spread) is 0 on its side: the strongest evidence pairs can give."""
    from scipy import stats as st

    z = np.asarray(z, float)
    if z.size < 2:
        return 1.0, 1.0
    t = float(studentized(z[None, :])[0])
    if np.isnan(t) or t == 0:
        return 1.0, 1.0
    if np.isinf(t):
        return (0.0, 1.0) if t > 0 else (1.0, 0.0)
    return float(st.t.sf(t, z.size - 1)), float(st.t.cdf(t, z.size - 1))


def flip_p(d, seed: int = 0) -> float:
    """One-sided p of "the mean of d is above 0" for one figure: the share of its own 2^m sign patterns whose
    mean reaches the observed one (exact up to EXACT_UP_TO pairs). Given d less the allowed change, this is the
    test of "changed by more than the tolerance"."""
    d = np.asarray(d, float)
    if d.size == 0:
        return 1.0
    means = (patterns(d.size, seed) * d[None, :]).mean(axis=1)
    return _share_at_least(means, means[0])


def _share_at_least(values: np.ndarray, t: float) -> float:
    if np.isneginf(t):
        return 1.0
    if np.isposinf(t):
        return float(np.count_nonzero(np.isposinf(values))) / values.size
    # ties count against the figure; a sliver of tolerance keeps floating error from splitting a tie
    return float(np.count_nonzero(values >= t - 1e-9 * max(1.0, abs(t)))) / values.size


def t_interval(d, confidence: float) -> tuple[float | None, float | None, float | None]:
    """Mean of d with its Student-t interval; (mean, None, None) with fewer than 3 values: two values give an
    interval too wide to say anything (t at 1 degree of freedom is 12.7), so none is claimed."""
    from scipy import stats as st

    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return None, None, None
    m = float(d.mean())
    if d.size < 3:
        return m, None, None
    h = float(st.t.ppf(0.5 + confidence / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    return m, m - h, m + h


def ratio_interval(log_ratios, confidence: float) -> tuple[float | None, float | None, float | None]:
    """The geometric mean of ratios with its interval, from their logs: never below 0, as no ratio can be."""
    return tuple(None if v is None else math.exp(v) for v in t_interval(log_ratios, confidence))


def positive_mean_interval(values, confidence: float) -> tuple[float | None, float | None, float | None, str]:
    """The mean of a positive quantity (a time, a count) with an interval that stays above 0.

    All values > 0: Cox's interval for a log-normal mean, exp(ybar + s^2/2 +- t sqrt(s^2/n + s^4/(2(n-1)))) on
    y = log x. Some value 0: Student's t, its lower bound held at 0 (said in the method). Fewer than 3 values: the
    mean alone. Returns (mean, low, high, method)."""
    from scipy import stats as st

    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None, None, None, "mean"
    mean = float(v.mean())
    if v.size < 3:
        return mean, None, None, "mean"
    t = float(st.t.ppf(0.5 + confidence / 2, v.size - 1))
    if np.all(v > 0):
        y = np.log(v)
        s2 = float(y.var(ddof=1))
        centre = float(y.mean()) + s2 / 2
        h = t * math.sqrt(s2 / v.size + s2 ** 2 / (2 * (v.size - 1)))
        return mean, math.exp(centre - h), math.exp(centre + h), "log-normal (Cox)"
    h = t * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, max(0.0, mean - h), mean + h, "student-t, bounded at 0"
