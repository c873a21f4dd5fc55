"""What every effect shares: its parameters read and checked in one place, and the kinds of effect."""

from __future__ import annotations

import math
from typing import ClassVar


def whole(v) -> int | None:
    """v as an int when it is one: an int, or a float with no fraction (5.0 is the integer 5 to JSON and to the
    control API's JSON Schema); None for anything else, bools included."""
    if type(v) is int:
        return v
    if type(v) is float and v.is_integer():  # False for inf and nan
        return int(v)
    return None


class Params:
    """Reads an effect's params dict, filling defaults (null is the default too); unknown keys and bad values raise
    ValueError naming params.KEY, which the admin API answers as a 400. schema: each parameter read, as JSON
    Schema (the control API's document, openapi.py)."""

    def __init__(self, effect: str, raw: dict):
        self.effect, self.raw, self.out = effect, raw, {}
        self.schema: dict[str, dict] = {}

    def _bad(self, key: str, why: str):
        raise ValueError(f"params.{key}: {why} (effect {self.effect})")

    def _get(self, key: str, default, schema: dict):
        self.schema[key] = schema if default is None else {**schema, "default": default}
        v = self.raw.get(key)
        return default if v is None else v

    def num(self, key: str, default: float | None, lo: float = 0.0, hi: float = math.inf) -> float | None:
        v = self._get(key, default, {"type": ["number", "null"], "minimum": lo,
                                     **({"maximum": hi} if math.isfinite(hi) else {})})
        if v is None:
            self.out[key] = None
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            self._bad(key, f"{v!r} must be a number from {lo} to {hi}")
        self.out[key] = v
        return float(v)

    def int_(self, key: str, default: int | None, lo: int = 0, hi: int | None = None) -> int | None:
        v = self._get(key, default, {"type": ["integer", "null"], "minimum": lo,
                                     **({"maximum": hi} if hi is not None else {})})
        if v is None:
            self.out[key] = None
            return None
        n = whole(v)
        if n is None or n < lo or (hi is not None and n > hi):
            self._bad(key, f"{v!r} must be a whole number >= {lo}" + (f" and <= {hi}" if hi is not None else ""))
        self.out[key] = n
        return n

    def choice(self, key: str, default, options):
        v = self._get(key, default, {"enum": [*options, None]})
        v = v if whole(v) is None else whole(v)  # 429.0 is the status 429
        if isinstance(v, bool) or v not in options:
            self._bad(key, f"{v!r} is not one of {list(options)}")
        self.out[key] = v
        return v

    def str_(self, key: str, default: str | None) -> str | None:
        v = self._get(key, default, {"type": ["string", "null"]})
        if v is not None and not isinstance(v, str):
            self._bad(key, f"{v!r} must be a string")
        self.out[key] = v
        return v

    def bool_(self, key: str, default: bool) -> bool:
        v = self._get(key, default, {"type": ["boolean", "null"]})
        if not isinstance(v, bool):
            self._bad(key, f"{v!r} must be true or false")
        self.out[key] = v
        return v

    def done(self) -> dict:
        extra = set(self.raw) - set(self.out)
        if extra:
            self._bad(sorted(extra)[0], f"unknown parameter (known: {sorted(self.out) or 'none'})")
        return self.out


class Effect:
    """One fault. kind says where it acts:
    answer  - answers instead of the upstream (the upstream never sees the request)
    request - on the way to the upstream
    stream  - on the SSE events of a streamed answer
    content - on the text of an answer, streamed or not
    Per-request state lives in the Run the proxy passes in (run.state), never on the effect: one effect object
    serves every request its rule applies to."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    help: ClassVar[str] = ""  # one line for --help and the docs

    def __init__(self, params: dict):
        p = Params(self.name, params)
        self.configure(p)
        self.params = p.done()

    def configure(self, p: Params) -> None:
        """Read params with p; store what the effect needs on self."""

    @classmethod
    def params_schema(cls) -> dict:
        """The params this effect takes, as JSON Schema: what configure() reads from empty params."""
        p = Params(cls.name, {})
        cls.configure(cls.__new__(cls), p)
        return {"type": ["object", "null"], "additionalProperties": False, "properties": p.schema}

    def takes(self, rule) -> bool:
        """Last word on whether the rule acts on this request (the storm counts its own cycle here)."""
        return True


class Run:
    """One applied rule on one request: what the effect did goes into detail, for the log."""

    __slots__ = ("rule", "effect", "detail", "state")

    def __init__(self, rule, effect: Effect):
        self.rule, self.effect = rule, effect
        self.detail = ""
        self.state: dict = {}

    @property
    def active(self) -> bool:
        return not self.rule.removed

    @property
    def tag(self) -> str:
        return f"{self.rule.name}; {self.effect.name}"
