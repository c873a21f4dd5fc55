"""Gateway settings, validated where they are made. Timeouts may be "auto": 1.5 x the measured P99."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# Seconds and sizes: finite and above 0.
POSITIVE = ("auto_floor_s", "auto_default_s", "backoff_base_s", "backoff_max_s", "health_interval_s",
            "health_timeout_s", "eject_for_s", "breaker_open_s", "queue_timeout_s", "retry_after_s", "cache_ttl_s",
            "header_timeout_s", "body_timeout_s", "retry_budget_window_s")
# Other numbers: (low, high), both included (what each means is next to its field).
BOUNDED = {"auto_body_s_per_mb": (0, 600), "retry_after_cap_s": (0, 3600), "retry_budget_ratio": (0, 5),
           "max_ejection_percent": (0, 100), "breaker_error_rate": (0, 1)}
# Whole numbers: (low, high). The highs only keep absurd values out (a 400-digit breaker_window would be an
# OverflowError when the deque is made); breaker_min_requests may exceed the window: the breaker never opens.
INTEGERS = {"retries": (0, 5), "retry_budget_min": (0, 10**9), "unhealthy_after_checks": (1, 10**6),
            "eject_after_failures": (1, 10**9), "breaker_window": (1, 10**6), "breaker_min_requests": (1, 10**9),
            "max_concurrency": (1, 10**6), "max_queue": (0, 10**9), "max_body_mb": (1, 2**20),
            "inspect_max_kb": (0, 2**30), "cache_size": (0, 10**9)}


@dataclass(slots=True)
class GatewaySettings:
    first_token_timeout: float | str = "auto"  # per attempt: headers and first data chunk
    total_timeout: float | str = 120.0  # per attempt, whole response
    # Mid-stream, the longest an upstream may send nothing before the stream is ended with an error event and the
    # replica charged (a stalled replica or link otherwise holds the client until total_timeout). None: no limit.
    stream_idle_timeout_s: float | None = None
    auto_floor_s: float = 2.0  # "auto" never goes below this
    auto_default_s: float = 10.0  # "auto" before enough samples exist
    # "auto" is learned from ordinary requests: a large body also has to be sent and parsed before any answer can
    # come, so it gets this much more per MB (a 20 MB body answered with a 400 took ~3 s on a busy 2-core box).
    auto_body_s_per_mb: float = 0.5
    retries: int = 2  # at most, and only while nothing has been streamed to the client
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0
    retry_after_cap_s: float = 5.0  # an upstream's Retry-After is honoured up to this
    retry_budget_ratio: float = 0.2  # retries in the window at most this fraction of its requests ...
    retry_budget_min: int = 10  # ... plus this many, so a quiet gateway still retries
    retry_budget_window_s: float = 10.0
    health_interval_s: float = 1.0
    health_timeout_s: float = 1.0
    unhealthy_after_checks: int = 2  # consecutive failed /health checks before a replica counts as down
    eject_after_failures: int = 3  # consecutive failures eject a replica (passive outlier detection)
    eject_for_s: float = 5.0
    max_ejection_percent: float = 50.0  # of a pool at once, rounded down: never the last replica
    breaker_window: int = 20  # last N results per replica
    breaker_min_requests: int = 5
    breaker_error_rate: float = 0.5
    breaker_open_s: float = 5.0
    max_concurrency: int = 256  # requests upstream at once
    max_queue: int = 512  # waiting for a slot beyond that; more is refused with 429
    queue_timeout_s: float = 30.0
    retry_after_s: float = 1.0  # what the gateway itself says when it refuses
    max_body_mb: int = 32  # larger bodies get 413 at the edge (the replicas' default too)
    inspect_max_kb: int = 1024  # bodies up to this are parsed here (envelope check, cache); larger go as bytes
    header_timeout_s: float = 10.0  # a client's request line and headers must arrive within this (serving.listen)
    body_timeout_s: float = 30.0  # and its whole body within this (408 and the connection closed otherwise)
    cache_size: int = 1024  # answers kept for the cache fallback (0 turns it off)
    cache_ttl_s: float = 600.0
    seed: int | None = None  # backoff jitter
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("first_token_timeout", "total_timeout"):
            v = getattr(self, name)
            if v != "auto" and not _number(v) > 0:
                raise ValueError(f"{name} must be a positive number of seconds or 'auto', got {_show(v)}")
        for name in POSITIVE:
            v = getattr(self, name)
            if not _number(v) > 0:
                raise ValueError(f"{name} must be a positive finite number, got {_show(v)}")
        for name, (low, high) in BOUNDED.items():
            v = getattr(self, name)
            if not low <= _number(v) <= high:
                raise ValueError(f"{name} must be a number from {low:g} to {high:g}, got {_show(v)}")
        if self.breaker_error_rate == 0:
            raise ValueError("breaker_error_rate must be above 0 (0 would open at the first result)")
        for name, (low, high) in INTEGERS.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise ValueError(f"{name} must be a whole number from {low} to {high}, got {_show(v)}")
        if self.header_timeout_s > 3600 or self.body_timeout_s > 3600:
            raise ValueError("header_timeout_s and body_timeout_s must be at most 3600 seconds")
        idle = self.stream_idle_timeout_s
        if idle is not None and not 0 < _number(idle) <= 3600:
            raise ValueError(f"stream_idle_timeout_s must be a number of seconds above 0 and at most 3600, or null, "
                             f"got {_show(idle)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be a whole number or null, got {_show(self.seed)}")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 2**20)

    @classmethod
    def from_dict(cls, d: dict) -> GatewaySettings:
        known = set(cls.__slots__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown gateway settings: {', '.join(sorted(unknown))}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


def _number(v) -> float:
    """v as a float; NaN (which fails every comparison) when it is no finite number: not a number, a bool, inf,
    or an int too large for a float (OverflowError must not escape: callers catch ValueError)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    try:
        f = float(v)
    except OverflowError:
        return math.nan
    return f if math.isfinite(f) else math.nan


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
