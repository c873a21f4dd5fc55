"""The verify: section (and the SLOs the steady state shares) as typed values: what the checks read.

The loader builds a Verify from the validated file, so the checks never parse a duration or a percentage and
never read a key by name. Each part checks its own values in __post_init__, so one built in code is held to
what a file is held to; a problem names its path below verify: (SpecError), which the loader turns into
file:line:col. Imports only chaos.common: the checks beside it read these types without the loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ..common import parse_duration, parse_percent
from .specerror import SpecError
from .stabilityspec import StabilitySpec

DEFAULT_WINDOW = 5.0  # recovery_time.window when not given: the width of the window recovery is judged over
FALLBACK_PATHS = ("backup", "cache")
GROWTH_METRICS = ("ttft", "e2e")


def _positive(key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise SpecError.at(key, f"{v!r} is not a duration above 0 (seconds); write e.g. 5s")
    return float(v)


def _fraction(key: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:  # NaN fails this too
        raise SpecError.at(key, f"{v!r} is not a fraction from 0 to 1; write e.g. 1% or 0.01")
    return float(v)


def _parsed(d: dict, key: str, parse, default=None):
    """d[key] read by parse, its ValueError as a SpecError at key (the file's value is quoted in it)."""
    if key not in d:
        return default
    try:
        return parse(d[key])
    except SpecError:
        raise
    except (ValueError, TypeError) as e:
        raise SpecError.at(key, str(e)) from None


def _mapping(v, what: str) -> dict:
    if not isinstance(v, dict):
        raise SpecError([((), f"{what} takes a mapping, got {type(v).__name__}")])
    return v


@dataclass(slots=True)
class SLO:
    """Bounds on a window's requests: latency percentiles (E2E unless named ttft; never the mean), error rate."""

    p50_latency: float | None = None
    p95_latency: float | None = None
    p99_latency: float | None = None
    ttft_p95: float | None = None
    ttft_p99: float | None = None
    error_rate: float | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                setattr(self, f.name, (_fraction if f.name == "error_rate" else _positive)(f.name, v))

    @classmethod
    def from_dict(cls, d: dict | None) -> "SLO":
        d = _mapping(d or {}, "an SLO")
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise SpecError.at(unknown[0], f"not an SLO bound; give {', '.join(f.name for f in fields(cls))}")
        return cls(**{k: _parsed(d, k, parse_percent if k == "error_rate" else parse_duration) for k in d})

    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in self.__slots__)


@dataclass(slots=True)
class RecoveryTime:
    """recovery_time: the service meets the steady-state SLO again within max seconds, judged over windows
    window seconds wide."""

    max: float
    window: float = DEFAULT_WINDOW

    def __post_init__(self):
        self.max, self.window = _positive("max", self.max), _positive("window", self.window)

    @classmethod
    def from_dict(cls, d: dict) -> "RecoveryTime":
        d = _mapping(d, "recovery_time")
        if "max" not in d:
            raise SpecError.at("max", "recovery_time needs max: the longest recovery allowed, e.g. 10s")
        return cls(_parsed(d, "max", parse_duration), _parsed(d, "window", parse_duration, DEFAULT_WINDOW))


@dataclass(slots=True)
class Fallback:
    """fallback: each path (backup replicas, the gateway's cache) answers within `within` s of the first fault."""

    within: float
    paths: list[str] = field(default_factory=lambda: list(FALLBACK_PATHS))

    def __post_init__(self):
        self.within = _positive("within", self.within)
        self.paths = list(self.paths) or list(FALLBACK_PATHS)  # an empty list is every path, as it always was
        bad = [p for p in self.paths if p not in FALLBACK_PATHS]
        if bad:
            raise SpecError.at("paths", f"no fallback path {bad[0]!r}; choose from {', '.join(FALLBACK_PATHS)}")
        if len(set(self.paths)) < len(self.paths):
            raise SpecError.at("paths", f"{self.paths} names a path twice; name each once")

    @classmethod
    def from_dict(cls, d: dict) -> "Fallback":
        d = _mapping(d, "fallback")
        if "within" not in d:
            raise SpecError.at("within", "fallback needs within: how soon a fallback must answer, e.g. 12s")
        return cls(_parsed(d, "within", parse_duration), d.get("paths") or [])


@dataclass(slots=True)
class Growth:
    """latency_growth: per input size (load.input_tokens as sizes), fail on a knee, a step growing over
    max_knee_ratio x the line through the smaller sizes; bootstrapped at `confidence` (chaos/verify/growth.py)."""

    metric: str = "ttft"
    max_knee_ratio: float = 3.0
    min_requests: int = 8
    confidence: float = 0.9

    def __post_init__(self):
        if self.metric not in GROWTH_METRICS:
            raise SpecError.at("metric", f"metric must be one of {', '.join(GROWTH_METRICS)}, not {self.metric!r}")
        r = self.max_knee_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 1 < r <= 1000:
            raise SpecError.at("max_knee_ratio", f"{r!r} is not a ratio above 1 and at most 1000; write e.g. 3")
        n = self.min_requests
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise SpecError.at("min_requests", f"{n!r} is not a whole number of at least 2 (a percentile of one "
                                               f"request is no percentile)")
        c = self.confidence
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0.5 < c < 1:
            raise SpecError.at("confidence", f"{c!r} is not a share above 0.5 and below 1; write e.g. 0.9")
        self.max_knee_ratio, self.confidence = float(r), float(c)

    @classmethod
    def from_dict(cls, d: dict | None) -> "Growth":
        d = _mapping(d or {}, "latency_growth")
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise SpecError.at(unknown[0], f"not a latency_growth setting; give "
                                           f"{', '.join(f.name for f in fields(cls))}")
        return cls(**d)


@dataclass(slots=True)
class Verify:
    """What must hold after a run; each member None (or False) when the file does not ask for that check."""

    error_rate_during_fault: float | None = None  # the most a fault may fail, a fraction
    slo_during_fault: SLO | None = None
    recovery_time: RecoveryTime | None = None
    slo_after: SLO | None = None
    status_codes: list[int] | None = None  # the statuses allowed
    served_by_all: bool = False
    fallback: Fallback | None = None
    latency_growth: Growth | None = None
    stability: object | None = None  # chaos.experiment.stabilityspec.StabilitySpec (output stability)

    def __post_init__(self):
        if self.error_rate_during_fault is not None:
            self.error_rate_during_fault = _fraction("error_rate_during_fault", self.error_rate_during_fault)
        for name, kind in (("slo_during_fault", SLO), ("slo_after", SLO), ("recovery_time", RecoveryTime),
                           ("fallback", Fallback), ("latency_growth", Growth)):
            v = getattr(self, name)
            if v is not None and not isinstance(v, kind):
                raise SpecError.at(name, f"takes a {kind.__name__} (build one with {kind.__name__}.from_dict), "
                                         f"got {type(v).__name__}")
        if self.status_codes is not None:
            codes = list(self.status_codes)
            bad = [c for c in codes if isinstance(c, bool) or not isinstance(c, int) or not 100 <= c <= 599]
            if not codes or bad:
                raise SpecError.at("status_codes", f"allowed takes HTTP statuses from 100 to 599, at least one; "
                                                   f"got {bad[0] if bad else codes!r}")
            self.status_codes = codes
        if not isinstance(self.served_by_all, bool):
            raise SpecError.at("served_by_all", f"takes true or false, got {self.served_by_all!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "Verify":
        """From a verify: mapping as the schema accepts it; SpecError lists every problem at once."""
        d = _mapping(d or {}, "verify")
        got, problems = {}, []
        for key, v in d.items():
            build = _BUILD.get(key)
            if build is None:
                problems.append(((key,), f"no check {key!r}; choose from {', '.join(_BUILD)}"))
                continue
            try:
                got[key] = build(v)
            except SpecError as e:
                problems += e.under(key).problems
        if problems:
            raise SpecError(problems)
        return cls(**got)

    def asked(self) -> list[str]:
        """The checks the file asks for, by their keys."""
        return [f.name for f in fields(self) if getattr(self, f.name) not in (None, False)]

    def is_empty(self) -> bool:
        return not self.asked()

    @property
    def recovery_window(self) -> float:
        """The window recovery is judged over (also when recovery_time is not asked for: slo_after starts at
        the recovery point)."""
        return self.recovery_time.window if self.recovery_time is not None else DEFAULT_WINDOW


def _status_codes(d) -> list[int]:
    d = _mapping(d, "status_codes")
    if "allowed" not in d:
        raise SpecError.at("allowed", "status_codes needs allowed: the statuses the load may see, e.g. [200]")
    return list(d["allowed"])


def _error_rate(d) -> float:
    d = _mapping(d, "error_rate_during_fault")
    if "max" not in d:
        raise SpecError.at("max", "error_rate_during_fault needs max: the most the fault may fail, e.g. 10%")
    return _parsed(d, "max", parse_percent)




_BUILD = {
    "error_rate_during_fault": _error_rate,
    "slo_during_fault": SLO.from_dict,
    "recovery_time": RecoveryTime.from_dict,
    "slo_after": SLO.from_dict,
    "status_codes": _status_codes,
    "served_by_all": lambda v: v,
    "fallback": Fallback.from_dict,
    "latency_growth": Growth.from_dict,
    "stability": StabilitySpec.from_dict,
}
