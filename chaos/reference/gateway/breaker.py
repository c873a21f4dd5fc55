"""A circuit breaker per replica: closed, open on an error burst, half-open probe, closed again."""

from __future__ import annotations

import time
from collections import deque

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    def __init__(self, window: int, min_requests: int, error_rate: float, open_s: float, clock=time.monotonic):
        self.results: deque[bool] = deque(maxlen=window)
        self.min_requests, self.error_rate, self.open_s = min_requests, error_rate, open_s
        self.clock = clock
        self.state = CLOSED
        self.opened_at = 0.0
        self.probe_in_flight = False
        self.transitions: list[tuple[float, str]] = []

    def _to(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.transitions.append((self.clock(), state))

    def can_pass(self) -> bool:
        """May a request go to this replica now? (Side-effect free; see begin.)"""
        if self.state == CLOSED:
            return True
        if self.state == OPEN:
            return self.clock() - self.opened_at >= self.open_s
        return not self.probe_in_flight

    def begin(self) -> bool:
        """A request is going out; True when it is the half-open probe (open past its time)."""
        if self.state == OPEN and self.clock() - self.opened_at >= self.open_s:
            self._to(HALF_OPEN)
        if self.state == HALF_OPEN and not self.probe_in_flight:
            self.probe_in_flight = True
            return True
        return False

    def abandon_probe(self) -> None:
        """The probe ended without a verdict (the client left): let the next request probe instead."""
        if self.state == HALF_OPEN:
            self.probe_in_flight = False

    def record(self, ok: bool) -> None:
        if self.state == HALF_OPEN:
            self.probe_in_flight = False
            if ok:
                self.results.clear()
                self._to(CLOSED)
            else:
                self.opened_at = self.clock()
                self._to(OPEN)
            return
        self.results.append(ok)
        if self.state == CLOSED and len(self.results) >= self.min_requests:
            failures = sum(1 for r in self.results if not r)
            if failures / len(self.results) >= self.error_rate:
                self.opened_at = self.clock()
                self._to(OPEN)
