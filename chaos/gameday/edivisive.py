"""E-divisive means with a t-test: the change points of one series, as Hunter (Fleming et al., "Hunter: Using Change
Point Detection to Hunt for Performance Regressions", ICPE 2023) and Apache Otava, its successor, find them.

Written here from the papers and a reading of Otava 0.8.0, not taken from it: Otava pins numpy 2.2 and scipy
< 1.17 and pulls BigQuery, Postgres and Slack clients; MongoDB's signal-processing-algorithms pins numpy < 2 and
gevent < 25 (Locust's). tests/gameday/test_edivisive.py holds this module to Otava's change points on the same
series.

The method, in three steps:
- candidate: within a stretch of the series, the split tau that maximises Matteson and James' Q-hat, the energy
  distance between x[:tau] and x[tau:kappa] scaled by their sizes, over every end kappa (so a change near the end
  of a long stretch is not drowned by what follows it);
- split: windows of `window` values, half a window apart; in each, stretches are split at their best candidate
  while the two sides' Student t-test gives p <= 10 x max_p (the weak change points);
- merge: over the whole series, the weakest change point (highest p; once all pass, the smallest change) is
  dropped while its p is >= max_p or its change is no bigger than min_size, and its neighbours are judged again
  on their new sides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Detector:
    window: int = 30  # values a split looks at: a change is found against at most this many
    max_p: float = 0.001  # a change point's t-test must give less

    def __post_init__(self) -> None:
        if self.window < 4:
            raise ValueError(f"window {self.window}: at least 4 values, two a side")
        if not 0 < self.max_p < 0.5:
            raise ValueError(f"max_p {self.max_p}: between 0 and 0.5")

    @property
    def first_p(self) -> float:
        # the split keeps weak change points at a looser p, for the merge to judge on whole segments (Hunter, 4.2;
        # Otava's factors)
        return self.max_p * 10 if self.max_p < 0.05 else self.max_p * 2


@dataclass(slots=True)
class Split:
    """A change point: `index` is the first value of the new segment; the sides are the segments either side."""
    index: int
    p: float
    mean_before: float
    mean_after: float
    sd_before: float
    sd_after: float
    n_before: int
    n_after: int


def candidate(x: np.ndarray) -> tuple[int, float] | None:
    """The best split tau of x (1 <= tau < len(x)) by Q-hat over every end kappa, and its Q-hat; None under 2."""
    n = len(x)
    if n < 2:
        return None
    cum = np.zeros((n + 1, n + 1))
    cum[1:, 1:] = np.abs(x[:, None] - x[None, :]).cumsum(0).cumsum(1)

    def block(r0, r1, c0, c1):  # the sum of |x_i - x_j| over i in [r0, r1), j in [c0, c1)
        return cum[r1, c1] - cum[r0, c1] - cum[r1, c0] + cum[r0, c0]

    tau = np.arange(1, n)[:, None]
    kappa = np.arange(2, n + 1)[None, :]
    tau, kappa = np.broadcast_arrays(tau, kappa)
    valid = kappa > tau
    t, k = np.where(valid, tau, 1), np.where(valid, kappa, 2)
    m = k - t
    between = block(0, t, t, k)
    within_x, within_y = block(0, t, 0, t) / 2, block(t, k, t, k) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        cx = np.where(t > 1, 2 * m / (k * (t - 1)), 0.0)
        cy = np.where(m > 1, 2 * t / (k * (m - 1)), 0.0)
    q = 2 / k * between - cx * within_x - cy * within_y
    # an impossible (tau, kappa) counts as no difference at all, so that a stretch whose every split scores below
    # zero still gives a candidate, for the t-test to refuse
    q = np.where(valid, q, 0.0)
    i, j = np.unravel_index(int(np.argmax(q)), q.shape)
    return int(i) + 1, float(q[i, j])


def ttest(before: np.ndarray, after: np.ndarray) -> tuple[float, float, float, float, float]:
    """Student's two-sided t-test of two segments, pooled variance: (p, mean, mean, sd, sd). The sds are population
    sds and enter the pooled variance as sample sds would, as Otava computes it, so that its change points and
    these agree; a side of one value has sd 0. p is 1 where nothing can be told (two values in all, or both sides
    constant and equal). scipy.stats.ttest_ind_from_stats gives the same p (a test holds them equal); its import
    and checks cost more than the whole detector on a game-day history."""
    from scipy.special import stdtr

    n1, n2 = len(before), len(after)
    m1, m2 = float(np.mean(before)), float(np.mean(after))
    s1 = float(np.std(before)) if n1 > 1 else 0.0
    s2 = float(np.std(after)) if n2 > 1 else 0.0
    df = n1 + n2 - 2
    if df <= 0:
        return 1.0, m1, m2, s1, s2
    se = math.sqrt(((n1 - 1) * s1 * s1 + (n2 - 1) * s2 * s2) / df * (1 / n1 + 1 / n2))
    if se == 0:
        return (1.0 if m1 == m2 else 0.0), m1, m2, s1, s2
    return float(2 * stdtr(df, -abs(m1 - m2) / se)), m1, m2, s1, s2


def judge(x: np.ndarray, index: int, lo: int, hi: int) -> Split:
    p, m1, m2, s1, s2 = ttest(x[lo:index], x[index:hi])
    return Split(index, p, m1, m2, s1, s2, index - lo, hi - index)


def window_splits(w: np.ndarray, first_p: float) -> list[int]:
    """One window's weak change points: split the stretch with the highest Q-hat candidate while it passes."""
    cuts: list[int] = []
    while True:
        bounds = [0, *cuts, len(w)]
        best = None
        for lo, hi in zip(bounds, bounds[1:]):
            c = candidate(w[lo:hi])
            if c is not None and (best is None or c[1] > best[1]):
                best = (lo + c[0], c[1], lo, hi)
        if best is None or judge(w, best[0], best[2], best[3]).p > first_p:
            return cuts
        cuts = sorted([*cuts, best[0]])


def split(x: np.ndarray, det: Detector) -> list[int]:
    """Every window's weak change points, windows half a window apart (a window restarts at the last one found)."""
    found: set[int] = set()
    start, step = 0, det.window // 2
    while start < len(x):
        local = window_splits(x[start:min(start + det.window, len(x))], det.first_p)
        found.update(start + i for i in local)
        start = max(start + local[-1] if local else 0, start + step)
    return sorted(found)


def relative_change(s: Split) -> float:
    """Otava's size of a change: the larger of after/before - 1 and before/after - 1, in absolute value."""
    up = abs(s.mean_after / s.mean_before - 1) if s.mean_before else 0.0
    down = abs(s.mean_before / s.mean_after - 1) if s.mean_after else 0.0
    return max(up, down)


def merge(x: np.ndarray, cuts: list[int], max_p: float, size: Callable[[Split], float] = relative_change,
          min_size: float = 0.0) -> list[Split]:
    """The weak change points thinned until each left has p < max_p and a change bigger than min_size, each judged
    on the segments between its neighbours."""
    def judged(cs: list[int]) -> list[Split]:
        bounds = [0, *cs, len(x)]
        return [judge(x, c, bounds[i], bounds[i + 2]) for i, c in enumerate(cs)]

    points = judged(cuts)
    while points:
        weakest = max(range(len(points)), key=lambda i: points[i].p)
        if points[weakest].p < max_p:
            weakest = min(range(len(points)), key=lambda i: size(points[i]))
            if size(points[weakest]) > min_size:
                return points
        del points[weakest]
        # the two neighbours of the one dropped each have a longer side now (Otava judges the one after and the
        # one after that again; the one before keeps its old side until the end, so its p can be stale)
        bounds = [0, *(p.index for p in points), len(x)]
        for i in (weakest - 1, weakest):
            if 0 <= i < len(points):
                points[i] = judge(x, points[i].index, bounds[i], bounds[i + 2])
    return points


def change_points(values, det: Detector | None = None, size: Callable[[Split], float] = relative_change,
                  min_size: float = 0.0) -> list[Split]:
    """The change points of a series, oldest first."""
    det = det or Detector()
    x = np.asarray(values, dtype=float)
    return merge(x, split(x, det), det.max_p, size, min_size)
