"""The gateway's own metrics: per-replica state, retries, breaker state, fallbacks, queue depth."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily

BREAKER = {"closed": 0, "half_open": 1, "open": 2}


class _State:
    def __init__(self, gw):
        self.gw = gw

    def collect(self):
        gw, now = self.gw, time.monotonic()
        up = GaugeMetricFamily("gateway:upstream_up", "1 when the replica is picked for traffic",
                               labels=["pool", "replica", "state"])
        br = GaugeMetricFamily("gateway:breaker_state", "0 closed, 1 half-open, 2 open", labels=["pool", "replica"])
        out = GaugeMetricFamily("gateway:upstream_outstanding", "requests in flight", labels=["pool", "replica"])
        for pool in (gw.primary, gw.backup):
            for u in pool.upstreams:
                up.add_metric([pool.name, u.name, u.state(now)], 1.0 if u.available(now) else 0.0)
                br.add_metric([pool.name, u.name], BREAKER[u.breaker.state])
                out.add_metric([pool.name, u.name], u.outstanding)
        yield up
        yield br
        yield out
        q = GaugeMetricFamily("gateway:queue_depth", "requests waiting for a slot")
        q.add_metric([], gw.queued)
        yield q
        f = GaugeMetricFamily("gateway:in_flight", "requests being served")
        f.add_metric([], gw.in_flight)
        yield f
        c = GaugeMetricFamily("gateway:cache_entries", "answers kept for the cache fallback")
        c.add_metric([], len(gw.cache))
        yield c


class GatewayMetrics:
    def __init__(self, gw):
        self.registry = CollectorRegistry()
        self.registry.register(_State(gw))
        r = self.registry
        self.retries = Counter("gateway:retries", "retried attempts", registry=r)
        self.fallbacks = Counter("gateway:fallbacks", "requests served by a fallback path", ["path"], registry=r)
        self.rejected = Counter("gateway:rejected", "requests refused by admission control", ["reason"], registry=r)
        self.served = Counter("gateway:served", "streams served by pool", ["pool"], registry=r)
        self.retries_denied = Counter("gateway:retries_denied", "retries the window's retry budget refused",
                                      registry=r)
        self.passed_up = Counter("gateway:passed_up", "upstream errors returned to the client as they came: busy "
                                 "(every candidate said 429 or similar) or poison (5xx on two replicas in a row)",
                                 ["reason"], registry=r)
        self.midstream_failures = Counter("gateway:midstream_failures", "upstream failures after streaming began",
                                          registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
