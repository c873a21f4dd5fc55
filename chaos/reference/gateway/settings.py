"""Gateway settings, validated where they are made. Timeouts may be "auto": 1.5 x the measured P99."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class GatewaySettings:
    first_token_timeout: float | str = "auto"  # per attempt: headers and first data chunk
    total_timeout: float | str = 120.0  # per attempt, whole response
    auto_floor_s: float = 2.0  # "auto" never goes below this
    auto_default_s: float = 10.0  # "auto" before enough samples exist
    retries: int = 2  # at most, and only while nothing has been streamed to the client
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0
    retry_after_cap_s: float = 5.0  # an upstream's Retry-After is honoured up to this
    health_interval_s: float = 1.0
    health_timeout_s: float = 1.0
    eject_after_failures: int = 3  # consecutive failures eject a replica (passive outlier detection)
    eject_for_s: float = 5.0
    breaker_window: int = 20  # last N results per replica
    breaker_min_requests: int = 5
    breaker_error_rate: float = 0.5
    breaker_open_s: float = 5.0
    max_concurrency: int = 256  # requests upstream at once
    max_queue: int = 512  # waiting for a slot beyond that; more is refused with 429
    queue_timeout_s: float = 30.0
    retry_after_s: float = 1.0  # what the gateway itself says when it refuses
    cache_size: int = 1024  # answers kept for the cache fallback (0 turns it off)
    cache_ttl_s: float = 600.0
    seed: int | None = None  # backoff jitter
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("first_token_timeout", "total_timeout"):
            v = getattr(self, name)
            if v != "auto" and (not isinstance(v, (int, float)) or v <= 0):
                raise ValueError(f"{name} must be a positive number of seconds or 'auto'")
        if not 0 <= self.retries <= 5:
            raise ValueError("retries must be between 0 and 5 (the seed advises at most 2)")
        if not 0 < self.breaker_error_rate <= 1:
            raise ValueError("breaker_error_rate must be in (0, 1]")
        if self.max_concurrency < 1 or self.max_queue < 0 or self.cache_size < 0:
            raise ValueError("max_concurrency >= 1, max_queue >= 0, cache_size >= 0")

    @classmethod
    def from_dict(cls, d: dict) -> "GatewaySettings":
        known = set(cls.__slots__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown gateway settings: {', '.join(sorted(unknown))}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)
