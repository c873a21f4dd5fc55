"""The bounds a request must meet to count towards goodput, as a typed value, and where they came from.

A request is good, as vLLM's benchmark_serving and DistServe define it, when it succeeded and met every bound
given: TTFT, TPOT ((E2E - TTFT) / (output tokens - 1)) and E2E. The experiment's steady_state.goodput names them;
without it the steady state's SLO lends its tail bounds (chaos/verify/goodput.py counts the good requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..common import parse_duration
from .specerror import SpecError

BOUNDS = ("ttft", "tpot", "e2e")
FROM_FILE = "steady_state.goodput"
NONE_TEXT = "no goodput: no SLO bounds"


@dataclass(slots=True)
class GoodputSLO:
    """Per-request bounds in seconds (None: not bounded); source says where they came from (None: no bounds)."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    source: str | None = None

    def __post_init__(self):
        for key in BOUNDS:
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SpecError.at(key, f"{v!r} is not a duration above 0 (seconds); write e.g. 2s or 100ms")
            setattr(self, key, float(v))
        if self.source is not None and not isinstance(self.source, str):
            raise SpecError.at("source", f"{self.source!r} is not text")
        if self.is_empty():
            self.source = None  # no bounds came from anywhere, whatever was said

    @classmethod
    def from_dict(cls, d: dict | None) -> "GoodputSLO":
        """steady_state.goodput as the file gives it: at least one of ttft, tpot, e2e, each a duration."""
        if not isinstance(d, dict):
            raise SpecError([((), f"goodput takes a mapping, got {type(d).__name__}")])
        unknown = sorted(set(d) - set(BOUNDS))
        if unknown:
            raise SpecError.at(unknown[0], f"not a goodput bound; give {', '.join(BOUNDS)}")
        if not d:
            raise SpecError([((), f"goodput needs at least one bound of {', '.join(BOUNDS)}, e.g. {{ttft: 2s}}")])
        got = {}
        for k, v in d.items():
            try:
                got[k] = parse_duration(v)
            except (ValueError, TypeError) as e:
                raise SpecError.at(k, str(e)) from None
        return cls(**got, source=FROM_FILE)

    @classmethod
    def from_slo(cls, slo) -> "GoodputSLO":
        """The steady state's SLO (chaos.verify.spec.SLO) read per request: its P99 bound where given, else its
        P95 one, for TTFT and for E2E. A request beyond the tail bound is beyond what the SLO lets any but a few
        be; a P50 bound is not used: half the requests may exceed a median's bound and still meet it."""
        ttft = next((k for k in ("ttft_p99", "ttft_p95") if getattr(slo, k, None) is not None), None)
        e2e = next((k for k in ("p99_latency", "p95_latency") if getattr(slo, k, None) is not None), None)
        used = [k for k in (ttft, e2e) if k]
        return cls(ttft=getattr(slo, ttft) if ttft else None, e2e=getattr(slo, e2e) if e2e else None,
                   source=f"steady_state.slo ({', '.join(used)})" if used else None)

    @classmethod
    def choose(cls, given: "GoodputSLO | None", slo) -> "GoodputSLO":
        """The file's own bounds when it gives them, else the steady-state SLO's."""
        return given if given is not None and not given.is_empty() else cls.from_slo(slo)

    def is_empty(self) -> bool:
        return all(getattr(self, k) is None for k in BOUNDS)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def text(self) -> str:
        """'TTFT <= 2.00 s, TPOT <= 100 ms (from steady_state.goodput)', or NONE_TEXT."""
        if self.is_empty():
            return NONE_TEXT
        parts = [f"{k.upper()} \u2264 {_duration(getattr(self, k))}" for k in BOUNDS if getattr(self, k) is not None]
        return f"{', '.join(parts)} (from {self.source})" if self.source else ", ".join(parts)


def _duration(v: float) -> str:
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
