"""Replicas as the gateway sees them: health, outstanding requests, ejection, breaker; least-outstanding picking.

What counts against a replica is decided in app.py (a client's 4xx and a busy 429 never do); here a verdict
moves the breaker and the ejection count. Passive ejection is capped per pool (max_ejection_percent, rounded
down, as Envoy's): a burst of failures that follows the traffic rather than a replica can never empty a pool;
a replica that is really down still leaves it through its breaker and the active health checks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from ...http1 import pool as http1pool
from ...http1.wire import HTTPError
from .breaker import CLOSED, CircuitBreaker
from .settings import GatewaySettings

log = logging.getLogger("chaos.gateway")


class Upstream:
    def __init__(self, name: str, url: str, settings: GatewaySettings, pool: str):
        self.name, self.url, self.pool = name, url.rstrip("/"), pool
        self.conns = http1pool.Pool(http1pool.Upstream(self.url))  # kept-alive connections for requests (attempt.py)
        self.probes = http1pool.Pool(self.conns.upstream, max_idle=1)  # the health checks' own connection
        self.healthy = True  # optimistic until the first check says otherwise
        self.outstanding = 0
        self.consecutive_failures = 0
        self.ejected_until = 0.0
        self.breaker = CircuitBreaker(settings.breaker_window, settings.breaker_min_requests,
                                      settings.breaker_error_rate, settings.breaker_open_s)
        self.settings = settings
        self.served = 0
        self.last_ok_at = -1e9  # monotonic time of the last success (the poison rule's evidence)
        self.failed_checks = 0
        self.peers: list[Upstream] = [self]  # the pool, set by Pool
        self.waiting: set[FirstByteDeadline] = set()  # attempts waiting for this upstream's first byte

    def available(self, now: float) -> bool:
        return self.healthy and now >= self.ejected_until and self.breaker.can_pass()

    def state(self, now: float) -> str:
        if not self.healthy:
            return "unhealthy"
        if now < self.ejected_until:
            return "ejected"
        return self.breaker.state if self.breaker.state != CLOSED else "up"

    def record(self, ok: bool) -> None:
        self.breaker.record(ok)
        if ok:
            self.consecutive_failures = 0
            self.served += 1
            self.last_ok_at = time.monotonic()
            return
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.settings.eject_after_failures:
            now = time.monotonic()
            ejected = sum(1 for u in self.peers if now < u.ejected_until)
            if ejected < int(len(self.peers) * self.settings.max_ejection_percent / 100):
                self.ejected_until = now + self.settings.eject_for_s
                self.consecutive_failures = 0
            # else: over the cap, it stays in; the next failure asks again

    def checked(self, ok: bool, timed_out: bool = False) -> None:
        """One active health check's result. An answer other than 200 or a refused connection is believed at
        once; a check that timed out only after unhealthy_after_checks in a row (one slow answer from a
        replica busy reading big bodies is not an outage). Up again at the first success."""
        self.failed_checks = 0 if ok else self.failed_checks + 1
        self.healthy = ok or (timed_out and self.failed_checks < self.settings.unhealthy_after_checks)
        if timed_out and not self.healthy:
            self.abandon_waiting()

    def abandon_waiting(self) -> None:
        """Release every attempt still waiting for this upstream's first byte: its /health checks timed out
        often enough to mark it unhealthy, so it is stopped (SIGSTOP, a hung event loop) or cannot take more.
        Nothing reached those clients yet, so they go on down the chain now instead of waiting out a
        first-token timeout sized for normal latency (under CPU contention "auto" grows to many seconds, longer
        than a frozen replica's pause and longer than clients wait: the cache fallback then never answered).
        Not at the first late check: the deadline covers queueing, prefill and a whole non-streamed
        generation, so releasing on one late answer would throw a busy replica's work away and move it."""
        if self.waiting:
            now = asyncio.get_running_loop().time()
            for deadline in list(self.waiting):
                deadline.abandon(now)


class FirstByteDeadline:
    """asyncio.timeout for one attempt's first byte, known to its upstream while it runs, so that
    Upstream.abandon_waiting can bring it forward."""

    __slots__ = ("abandoned", "timeout", "upstream")

    def __init__(self, upstream: Upstream, seconds: float):
        self.upstream, self.timeout, self.abandoned = upstream, asyncio.timeout(seconds), False

    async def __aenter__(self) -> FirstByteDeadline:
        await self.timeout.__aenter__()
        self.upstream.waiting.add(self)
        return self

    async def __aexit__(self, *exc):
        self.upstream.waiting.discard(self)
        return await self.timeout.__aexit__(*exc)

    def abandon(self, now: float) -> None:
        # Expired: its timer fired and the attempt is on its way out of __aexit__ (still in waiting until
        # then); the Timeout can no longer be moved and this attempt did not wait for the health check.
        if self.abandoned or self.timeout.expired():
            return
        self.abandoned = True
        self.timeout.reschedule(now)


class Pool:
    def __init__(self, name: str, upstreams: list[Upstream]):
        self.name, self.upstreams = name, upstreams
        for u in upstreams:
            u.peers = upstreams

    def pick(self, exclude: set[str]) -> Upstream | None:
        """Least outstanding among the available replicas not yet tried for this request."""
        now = time.monotonic()
        candidates = [u for u in self.upstreams if u.name not in exclude and u.available(now)]
        if not candidates:
            return None
        # A replica whose last health check failed goes last: it may be stalled (see abandon_waiting).
        return min(candidates, key=lambda u: (u.failed_checks > 0, u.outstanding, u.served))


class LatencyTracker:
    """Recent successful upstream timings, for "auto" timeouts (1.5 x P99, as the seed advises).

    Each P99 is computed again once EVERY new samples came, not per request: sorting 500 samples twice per request
    was 4 % of the gateway's CPU at 50 streams, and a P99 over the last 500 moves little in 25."""

    EVERY = 25

    def __init__(self, size: int = 500):
        self.ttft: deque[float] = deque(maxlen=size)
        self.total: deque[float] = deque(maxlen=size)
        self._added = {"first_token": 0, "total": 0}
        self._known: dict[str, tuple[int, float | None]] = {}  # kind -> (samples added when computed, P99)

    def add(self, kind: str, seconds: float) -> None:
        (self.ttft if kind == "first_token" else self.total).append(seconds)
        self._added[kind] += 1

    @staticmethod
    def _p99(values) -> float | None:
        if len(values) < 20:
            return None
        s = sorted(values)
        return s[min(len(s) - 1, int(0.99 * len(s)))]

    def p99(self, kind: str) -> float | None:
        added = self._added[kind]
        known = self._known.get(kind)
        if known is None or added - known[0] >= self.EVERY or (known[1] is None and added != known[0]):
            known = self._known[kind] = (added, self._p99(self.ttft if kind == "first_token" else self.total))
        return known[1]

    def timeout(self, kind: str, configured, floor: float, default: float) -> float:
        if configured != "auto":
            return float(configured)
        p99 = self.p99(kind)
        return default if p99 is None else max(floor, 1.5 * p99)


async def health_loop(pools: list[Pool], settings: GatewaySettings) -> None:
    """Active health checks: GET /health on every replica, every interval, on a kept-alive connection of its own.
    Nothing a check meets may end the loop: a dead loop would leave every replica's health as it last was for the
    gateway's whole life."""

    async def check(u: Upstream):
        try:
            try:
                async with asyncio.timeout(settings.health_timeout_s):
                    status, _ = await u.probes.fetch("GET", "/health", 64 * 1024)
                u.checked(status == 200)
            except TimeoutError:
                u.checked(False, timed_out=True)
            except (OSError, asyncio.IncompleteReadError, HTTPError):
                u.checked(False)
        except Exception:  # a bug of ours: say so, and check again next round
            log.exception("health check of %s failed", u.name)

    while True:
        await asyncio.gather(*(check(u) for p in pools for u in p.upstreams), return_exceptions=True)
        await asyncio.sleep(settings.health_interval_s)
