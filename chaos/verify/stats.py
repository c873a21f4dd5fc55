"""Figures with their noise: every estimate carries an interval, or says how many samples an interval would need.

A P99 from 40 requests is the maximum of 40 numbers, not a P99; a run that reports it as one misleads. So each
figure here is an Estimate: the point value, a confidence interval (distribution-free where one exists), the
sample count, and when the sample is too small for an interval, the count it would take (`needs`).

- percentiles: numpy's linear-interpolation point value and the order-statistic interval (no assumption about
  the latency distribution; exact coverage >= confidence, equal tails).
- proportion: Wilson score interval (sane at 0 errors and at small n, unlike p +- z*se).
- rate: exact Poisson (Garwood) interval, per second.
- ratio_of_percentiles (jitter P99/P50): bootstrap.

Every function is deterministic: resampling is seeded.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

METHODS = ("order-statistic", "bootstrap", "wilson", "poisson", "exact")


def scipy_stats():
    """scipy.stats, imported on first use: its import is 0.6 s, which a run spends on a thread of its own
    while its target starts (chaos.run.runner) rather than before it starts anything."""
    from scipy import stats

    return stats


@lru_cache(maxsize=1)
def _rng_arg() -> str:
    # scipy >= 1.15 names the generator rng (random_state before); pyproject allows older
    return "rng" if "rng" in inspect.signature(scipy_stats().bootstrap).parameters else "random_state"


@dataclass(slots=True)
class Estimate:
    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    confidence: float = 0.95
    method: str = "exact"
    needs: int | None = None  # samples an interval would need, when low/high are None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Estimate:
        return cls(**{k: d.get(k, v) for k, v in
                      (("value", None), ("low", None), ("high", None), ("n", 0), ("confidence", 0.95),
                       ("method", "exact"), ("needs", None))})

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def scaled(self, k: float) -> Estimate:
        """The same estimate in another unit (seconds -> ms: k=1000)."""
        def s(v):
            return None if v is None else v * k
        return Estimate(s(self.value), s(self.low), s(self.high), self.n, self.confidence, self.method, self.needs)

    def fmt(self, unit_fn: Callable[[float], str] = lambda v: f"{v:.3g}") -> str:
        """'512 ms [498–530] (n=300)' or '512 ms (interval needs n>=367; n=40)'; unit_fn renders one number."""
        if self.value is None:
            return f"n/a (n={self.n})"
        if self.has_interval:
            lo, hi = unit_fn(self.low), unit_fn(self.high)
            # The unit is written once, after the value: strip it from the bounds when unit_fn appends one.
            unit = unit_fn(self.value).partition(" ")[2]
            if unit:
                lo, hi = lo.removesuffix(" " + unit), hi.removesuffix(" " + unit)
            return f"{unit_fn(self.value)} [{lo}–{hi}] (n={self.n})"
        if self.needs is not None:
            return f"{unit_fn(self.value)} (interval needs n>={self.needs}; n={self.n})"
        return f"{unit_fn(self.value)} (n={self.n})"


def _alpha(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence!r}")
    return 1.0 - confidence


def _p(q: float) -> float:
    if not 0 < q < 100:
        raise ValueError(f"percentile q must be in (0, 100), e.g. 99; got {q!r}")
    return q / 100.0


def min_samples(q: float, confidence: float = 0.95) -> int:
    """The smallest n with an equal-tailed order-statistic interval for the q-th percentile: both tails of
    Binomial(n, q/100) beyond the sample, P(B = 0) = (1-p)^n and P(B = n) = p^n, must be <= (1-confidence)/2."""
    p, half = _p(q), _alpha(confidence) / 2
    worst = max(p, 1 - p)
    n = max(1, math.ceil(math.log(half) / math.log(worst)))
    # Guard the float log against landing one off either way.
    while worst ** n > half:
        n += 1
    while n > 1 and worst ** (n - 1) <= half:
        n -= 1
    return n


def min_point_samples(q: float) -> int:
    """The fewest samples for which a q-th percentile is more than the maximum: ceil(1 / (1 - q/100)).
    A check on fewer is not judged."""
    return math.ceil(round(1.0 / (1.0 - _p(q)), 9))


def _clean(values) -> np.ndarray:
    a = np.asarray(values, dtype=float).ravel()
    finite = np.isfinite(a)
    return a if finite.all() else a[finite]


@lru_cache(maxsize=4096)  # the same n recurs (phases, repeats, coverage checks); the binomial search costs ~1 ms
def _ranks(n: int, p: float, alpha: float) -> tuple[int, int] | None:
    """0-based indices (lo, hi) into the sorted sample whose values bound the p-quantile xi with probability
    >= 1 - alpha, each tail <= alpha/2, or None when n is too small for either.

    With B = #{X_i <= xi} ~ Binomial(n, p): sorted[lo] <= xi  <=>  B >= lo + 1, and xi < sorted[hi]  <=>
    B <= hi. So lo is the largest k with P(B <= k) <= alpha/2 and hi the smallest k with P(B <= k) >= 1 - alpha/2;
    P(sorted[lo] <= xi <= sorted[hi]) >= P(lo < B <= hi) >= 1 - alpha (ties only make it larger)."""
    b = scipy_stats().binom(n, p)
    lo = int(b.ppf(alpha / 2))  # a start near the answer; the loops make it exact against the cdf
    while lo >= 0 and b.cdf(lo) > alpha / 2:
        lo -= 1
    while lo + 1 < n and b.cdf(lo + 1) <= alpha / 2:
        lo += 1
    hi = int(b.ppf(1 - alpha / 2))
    while hi > 0 and b.cdf(hi - 1) >= 1 - alpha / 2:
        hi -= 1
    while hi < n and b.cdf(hi) < 1 - alpha / 2:
        hi += 1
    if lo < 0 or hi > n - 1:
        return None
    return lo, hi


def _interp(sorted_values: np.ndarray, n: int, q: float) -> float:
    """np.percentile's linear interpolation (its default method) on a sorted array."""
    h = (n - 1) * q / 100.0
    j = int(math.floor(h))
    if j >= n - 1:
        return float(sorted_values[n - 1])
    lo, hi = float(sorted_values[j]), float(sorted_values[j + 1])
    return lo + (h - j) * (hi - lo)


def percentiles(values, qs: Iterable[float] = (50, 95, 99), confidence: float = 0.95) -> dict[str, Estimate]:
    """'p50'/'p95'/'p99' -> Estimate, from one sort (numpy's SIMD sort: ~0.35 s for 10M values on this box, faster
    than np.partition on the dozen ranks the intervals read). Non-finite values are dropped."""
    return sorted_percentiles(np.sort(_clean(values)), qs, confidence)


def sorted_percentiles(s: np.ndarray, qs: Iterable[float] = (50, 95, 99),
                       confidence: float = 0.95) -> dict[str, Estimate]:
    """percentiles() of an already sorted, finite array (for callers that sort once and read it again)."""
    n, alpha = s.size, _alpha(confidence)
    out: dict[str, Estimate] = {}
    for q in qs:
        r = _ranks(n, _p(q), alpha) if n else None
        value = _interp(s, n, q) if n else None
        if r is None:
            out[_key(q)] = Estimate(value, n=n, confidence=confidence, method="order-statistic",
                                    needs=min_samples(q, confidence))
        else:
            out[_key(q)] = Estimate(value, float(s[r[0]]), float(s[r[1]]), n, confidence, "order-statistic")
    return out


def _key(q: float) -> str:
    return f"p{q:g}"


def percentile(values, q: float, confidence: float = 0.95) -> Estimate:
    """The q-th percentile (np.percentile's linear interpolation) with its distribution-free order-statistic
    interval; low/high None and `needs` set when n < min_samples(q, confidence)."""
    return percentiles(values, (q,), confidence)[_key(q)]


def proportion(k: int, n: int, confidence: float = 0.95) -> Estimate:
    """k of n (an error rate) with the Wilson score interval."""
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Estimate(None, n=0, confidence=confidence, method="wilson", needs=1)
    z = float(scipy_stats().norm.ppf(1 - _alpha(confidence) / 2))
    lo, hi = _wilson(k, n, z)
    return Estimate(k / n, lo, hi, n, confidence, "wilson")


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k = 0 or k = n the bound is exactly 0 or 1; keep float noise from putting it a hair beyond.
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def rate(count: int, seconds: float, confidence: float = 0.95) -> Estimate:
    """count events in seconds, per second, with the exact Poisson (Garwood) interval."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if not seconds or seconds <= 0:
        return Estimate(None, n=count, confidence=confidence, method="poisson")
    lo, hi = _garwood(count, _alpha(confidence))
    return Estimate(count / seconds, lo / seconds, hi / seconds, count, confidence, "poisson")


def _garwood(count: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if count == 0 else float(scipy_stats().chi2.ppf(alpha / 2, 2 * count)) / 2
    return lo, float(scipy_stats().chi2.ppf(1 - alpha / 2, 2 * count + 2)) / 2


# -- bootstrap ----------------------------------------------------------------------------------------------------

def resample_percentiles(sorted_values: np.ndarray, qs: Iterable[float], resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
    """The bootstrap distribution of np.percentile(resample, qs) for `resamples` resamples (with replacement,
    size n) of a sorted sample: an array of shape (resamples, len(qs)), each row from one resample.

    Exact, without building a resample: sorted, a resample is x[ceil(n * U_(1..n)) - 1] for the order statistics
    U_(k) of n uniforms, and the few U_(k) a percentile reads are drawn directly, in increasing k, by breaking
    the stick: given U_(j) = u, U_(k) = u + (1 - u) * Beta(k - j, n - k + 1). O(resamples) after the sort, so
    a 10M-value sample costs what a 100-value one does."""
    x = sorted_values
    n = x.size
    qs = list(qs)
    pos = {q: (n - 1) * q / 100.0 for q in qs}
    ks = sorted({int(math.floor(h)) + d for h in pos.values() for d in (0, 1) if int(math.floor(h)) + d < n})
    # ks are 0-based ranks; order statistic number k + 1.
    u = np.zeros(resamples)
    prev = 0  # order statistic number of u (0: the stick's start)
    drawn: dict[int, np.ndarray] = {}
    for k in ks:
        m = k + 1
        u = u + (1.0 - u) * rng.beta(m - prev, n - m + 1, size=resamples)
        prev = m
        drawn[k] = x[np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)]
    out = np.empty((resamples, len(qs)))
    for i, q in enumerate(qs):
        h = pos[q]
        j = int(math.floor(h))
        if j >= n - 1:
            out[:, i] = drawn[n - 1]
        else:
            out[:, i] = drawn[j] + (h - j) * (drawn[j + 1] - drawn[j])
    return out


def resample_grouped_percentiles(values, groups, qs: Iterable[float], resamples: int,
                                 rng: np.random.Generator, max_cells: int = 4_000_000, runs=None) -> np.ndarray:
    """resample_percentiles for values that are not independent: a cluster bootstrap, drawing whole groups (e.g.
    the requests of one half-second, which a host hiccup slows together) with replacement, G of the G groups.
    Shape (resamples, len(qs)); a resample's size varies with the groups it drew.

    runs: None, or a label per value of the run it came from (each group lies in one run): a two-stage bootstrap,
    drawing runs (R of R) and then, in each run drawn, its groups (G_r of G_r). Repeated runs differ by more than
    their windows show (the host's state over a whole run: a neighbour, the page cache), and only drawing runs
    carries that into the interval; with two or three runs a side the interval is wide, as it should be.

    Each resample is a weight per sorted value (how often its group was drawn); its percentile is read off the
    cumulative weights with np.percentile's linear interpolation. O(resamples x n), in chunks of max_cells."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="stable")
    x = v[order]
    _, gi = np.unique(np.asarray(groups)[order], return_inverse=True)
    n, g = x.size, int(gi.max()) + 1
    if runs is not None:
        group_run = np.zeros(g, dtype=np.int64)
        _, ri = np.unique(np.asarray(runs)[order], return_inverse=True)
        group_run[gi] = ri
        n_runs = int(ri.max()) + 1
        members = [np.flatnonzero(group_run == k) for k in range(n_runs)]
    qs = list(qs)
    out = np.empty((resamples, len(qs)))
    rows = max(1, max_cells // max(n, 1))
    for start in range(0, resamples, rows):
        r = min(rows, resamples - start)
        if runs is None:
            counts = rng.multinomial(g, np.full(g, 1.0 / g), size=r)  # (r, g): times each group was drawn
        else:
            drawn = rng.multinomial(n_runs, np.full(n_runs, 1.0 / n_runs), size=r)  # (r, runs)
            counts = np.zeros((r, g), dtype=np.int64)
            for k, idx in enumerate(members):
                counts[:, idx] = rng.multinomial(drawn[:, k] * idx.size, np.full(idx.size, 1.0 / idx.size))
        cum = np.cumsum(counts[:, gi], axis=1)  # (r, n): values at or below each sorted position
        total = cum[:, -1]
        for j, q in enumerate(qs):
            h = (total - 1) * q / 100.0
            k = np.floor(h)
            # the 0-based position k of a resample is the first sorted value whose cumulative weight exceeds k
            lo = x[np.argmax(cum > k[:, None], axis=1)]
            hi = x[np.argmax(cum > np.minimum(k + 1, total - 1)[:, None], axis=1)]
            out[start:start + r, j] = lo + (h - k) * (hi - lo)
    return out


def interval_of(dist: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile-method interval of a bootstrap distribution as order statistics: with m = floor(B * alpha/2),
    [d_(m), d_(B-1-m)] (0-based). "low > t" is then exactly "at most m resamples <= t", which lets a verdict read
    from the interval and from the bootstrap p-value (compare.py) agree."""
    d = np.sort(dist)
    m = int(math.floor(d.size * _alpha(confidence) / 2))
    return float(d[m]), float(d[d.size - 1 - m])


def ratio_of_percentiles(values, q_num: float = 99, q_den: float = 50, confidence: float = 0.95,
                         resamples: int = 1000, seed: int = 0) -> Estimate:
    """P(q_num) / P(q_den) (jitter: P99/P50) with a percentile-bootstrap interval (both percentiles from the same
    resample). Below min_point_samples(q_num) the numerator is just the maximum: no interval, `needs` says how
    many it takes."""
    a = np.sort(_clean(values))
    n = a.size
    need = max(min_point_samples(q_num), min_point_samples(q_den))
    if n == 0:
        return Estimate(None, n=0, confidence=confidence, method="bootstrap", needs=need)
    den = _interp(a, n, q_den)
    value = None if den <= 0 else _interp(a, n, q_num) / den
    if n < need or value is None:
        return Estimate(value, n=n, confidence=confidence, method="bootstrap", needs=need if n < need else None)
    dist = resample_percentiles(a, (q_num, q_den), resamples, np.random.default_rng(seed))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = dist[:, 0] / dist[:, 1]
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size < resamples * 0.99:  # the denominator is 0 in many resamples: no honest interval
        return Estimate(value, n=n, confidence=confidence, method="bootstrap")
    lo, hi = interval_of(ratios, confidence)
    return Estimate(value, lo, hi, n, confidence, "bootstrap")


def bootstrap(values, statistic: Callable[..., np.ndarray], confidence: float = 0.95, resamples: int = 1000,
              seed: int = 0, method: str = "BCa") -> Estimate:
    """Any statistic of one sample with scipy.stats.bootstrap's interval (BCa by default, or "percentile").
    `statistic(sample, axis=-1)` must be vectorised along axis, as np.mean or np.median are. Memory is
    resamples x n floats, in batches; for percentiles of large samples use resample_percentiles instead."""
    a = _clean(values)
    if a.size < 2:
        return Estimate(float(statistic(a, axis=-1)) if a.size else None, n=int(a.size), confidence=confidence,
                        method="bootstrap", needs=2)
    value = float(statistic(a, axis=-1))
    seeded = {_rng_arg(): np.random.default_rng(seed)}
    res = scipy_stats().bootstrap((a,), statistic, confidence_level=confidence, n_resamples=resamples,
                                  method=method, vectorized=True, batch=max(1, 20_000_000 // a.size), **seeded)
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):  # BCa on a degenerate sample (all equal)
        return Estimate(value, n=int(a.size), confidence=confidence, method="bootstrap")
    return Estimate(value, lo, hi, int(a.size), confidence, "bootstrap")
