"""A retry budget over a sliding window, as Finagle's and Envoy's: retries may add at most `ratio` of the
requests seen in the last `window_s`, plus `minimum` per window so that a quiet gateway still retries.

Why: per-request limits alone let a failing pool triple its own load (every request tried 1 + retries
times) exactly when it can least take it. With the budget spent, a request is not retried; it goes down the
fallback chain instead.

Counts live in `buckets` slots of window_s / buckets each: O(buckets) per retry, nothing per request but an
increment, and memory that does not grow with traffic.
"""

from __future__ import annotations

import time


class RetryBudget:
    def __init__(self, ratio: float, window_s: float, minimum: int, buckets: int = 10, clock=time.monotonic):
        self.ratio, self.minimum, self.n = ratio, minimum, buckets
        self.width = window_s / buckets
        self.clock = clock
        self.epoch = [-1] * buckets  # which window slice each slot holds
        self.requests = [0] * buckets
        self.retries = [0] * buckets

    def _slot(self) -> tuple[int, int]:
        k = int(self.clock() / self.width)
        i = k % self.n
        if self.epoch[i] != k:
            self.epoch[i], self.requests[i], self.retries[i] = k, 0, 0
        return i, k

    def _total(self, counts: list[int], k: int) -> int:
        return sum(c for c, e in zip(counts, self.epoch) if e > k - self.n)

    def request(self) -> None:
        i, _ = self._slot()
        self.requests[i] += 1

    def spend(self) -> bool:
        """True, and counted, when one more retry fits the budget now."""
        i, k = self._slot()
        if self._total(self.retries, k) + 1 > self.minimum + self.ratio * self._total(self.requests, k):
            return False
        self.retries[i] += 1
        return True
