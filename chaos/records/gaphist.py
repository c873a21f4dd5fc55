"""Inter-token gaps counted in fixed log-spaced bins: how a run too long to keep every gap still has ITL percentiles.

Bin 0 holds a gap of 0 µs; bin k >= 1 holds [RATIO^(k-1), RATIO^k) µs, so every bin is 0.5 % wide relative to its
value, from 1 µs to past an hour (the last bin also takes anything longer). A sorted sample's k-th value lies in a
known bin, so a percentile read from the counts is within a bin of the exact one: RELATIVE_ERROR of it when the
bin's geometric middle stands for it, and an order-statistic interval widened to its bins' outer edges still
covers what the exact one covers.
"""

from __future__ import annotations

import math

import numpy as np

RATIO = 1.005  # each bin's upper edge over its lower edge
MAX_US = 3600e6  # an hour: the top regular bin ends past it
BINS = 2 + math.ceil(math.log(MAX_US) / math.log(RATIO))
RELATIVE_ERROR = math.sqrt(RATIO) - 1  # the middle of a bin against any value in it, relative (~0.25 %)
_INV_LOG = 1.0 / math.log(RATIO)
# EDGES[k], EDGES[k + 1]: bin k's bounds in µs (the last bin is open above)
EDGES = np.concatenate(([0.0], RATIO ** np.arange(BINS)))
_MIDDLE = np.concatenate(([0.0], np.sqrt(EDGES[1:-1] * EDGES[2:])))


def bins(gaps_us: np.ndarray) -> np.ndarray:
    """The bin of each gap (integer µs; negative ones, from a foreign file, count as 0)."""
    g = np.asarray(gaps_us, dtype=np.float64)
    out = np.zeros(g.shape, dtype=np.int64)
    pos = g >= 1
    out[pos] = np.minimum(np.floor(np.log(g[pos]) * _INV_LOG).astype(np.int64) + 1, BINS - 1)
    return out


def counts(gaps_us: np.ndarray) -> np.ndarray:
    return np.bincount(bins(gaps_us), minlength=BINS).astype(np.int64)


class GapHistogram:
    """Counts of gaps (µs) per bin: the n sorted gaps' k-th one is known to its bin."""

    __slots__ = ("counts", "n", "_cum")

    def __init__(self, c: np.ndarray):
        self.counts = np.asarray(c, dtype=np.int64)
        self.n = int(self.counts.sum())
        self._cum = np.cumsum(self.counts)

    def bin_of_rank(self, k: int) -> int:
        """The bin holding the k-th (0-based) smallest gap."""
        if not 0 <= k < self.n:
            raise IndexError(f"rank {k} out of 0..{self.n - 1}")
        return int(np.searchsorted(self._cum, k, side="right"))

    def value(self, k: int) -> float:
        """The k-th smallest gap, µs, as its bin's geometric middle (within RELATIVE_ERROR of it)."""
        return float(_MIDDLE[self.bin_of_rank(k)])

    def low(self, k: int) -> float:
        """A value certain to be <= the k-th smallest gap: its bin's lower edge."""
        return float(EDGES[self.bin_of_rank(k)])

    def high(self, k: int) -> float:
        """A value certain to be >= the k-th smallest gap: its bin's upper edge (the top bin: the largest edge)."""
        return float(EDGES[min(self.bin_of_rank(k) + 1, BINS)])

    def interpolated(self, q: float) -> float:
        """np.percentile's linear interpolation between the two ranks it reads, on the bins' middles."""
        h = (self.n - 1) * q / 100.0
        j = int(math.floor(h))
        if j >= self.n - 1:
            return self.value(self.n - 1)
        lo, hi = self.value(j), self.value(j + 1)
        return lo + (h - j) * (hi - lo)
