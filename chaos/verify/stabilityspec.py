"""verify: stability: as a typed value (chaos/verify/stability.py judges it; docs/stability.md says what each
threshold means). Built by spec.py's Verify.from_dict; problems are its SpecError, so the loader
gives them file:line:col."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..common import parse_percent
from .specerror import SpecError

RATES = ("identical", "json_valid", "max_truncated", "max_repetition", "max_garbled")
LEAST = ("identical", "json_valid")  # the others are the most allowed
DEFAULT_LOOP = 0.5
DEFAULT_MIN_REPEATS = 10


def _error(key: str, message: str) -> SpecError:
    return SpecError.at(key, message)


@dataclass(slots=True)
class StabilitySpec:
    """Each rate a fraction, or None: off (reported, not judged). `written`: the rates the file set; a category
    the run had nothing to judge on (no structured request, no probe that stops before max_tokens) is not judged
    when written, and left out of the checks when only defaulted."""

    identical: float | None = 1.0  # the least share of probe answers identical to their key's baseline answer
    json_valid: float | None = 1.0  # the least share of answers to requests for JSON that parse
    max_truncated: float | None = 0.0  # the most probe answers cut at max_tokens where their baseline stopped
    max_repetition: float | None = 0.0  # the most answers ending in a loop over loop_threshold of them
    max_garbled: float | None = 0.0  # the most answers holding encoding damage
    loop_threshold: float = DEFAULT_LOOP
    min_repeats: int = DEFAULT_MIN_REPEATS
    written: tuple = ()

    def __post_init__(self):
        for key in RATES:
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1):
                raise _error(key, f"{v!r} is not a fraction from 0 to 1; write e.g. 100%, 0% or off")
        t = self.loop_threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
            raise _error("loop_threshold", f"{t!r} is not a share above 0 and below 1; write e.g. 0.5")
        n = self.min_repeats
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _error("min_repeats", f"{n!r} is not a whole number of at least 1")

    @classmethod
    def from_dict(cls, d) -> "StabilitySpec":
        if d is None or d is True:
            d = {}
        if not isinstance(d, dict):
            raise _error("stability", f"stability takes a mapping of thresholds (or {{}} for the defaults), got "
                                      f"{type(d).__name__}")
        known = {f.name for f in fields(cls)} - {"written"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise _error(unknown[0], f"not a stability setting; give {', '.join(sorted(known))}")
        got = {}
        for key, v in d.items():
            if key in RATES:
                try:
                    got[key] = None if v == "off" else parse_percent(v)
                except ValueError as e:
                    raise _error(key, f"{e}; or off") from None
            else:
                got[key] = v
        return cls(**got, written=tuple(k for k in RATES if k in d))

    def threshold_text(self, key: str) -> str:
        v = getattr(self, key)
        if v is None:
            return "off"
        return f"{'>=' if key in LEAST else '<='} {v * 100:g}%"

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in RATES}, "loop_threshold": self.loop_threshold,
                "min_repeats": self.min_repeats}

    @classmethod
    def of(cls, spec) -> "StabilitySpec":
        """A StabilitySpec from what a Verify (or a raw verify: mapping) holds: itself, a mapping, or None."""
        if isinstance(spec, cls):
            return spec
        return cls.from_dict(spec)
