"""A fault rule: which requests it matches, when it applies (probability, occurrences, count, window), its
effect, and its counters. Validated when added so a bad rule is a 400 naming the field, never a surprise later."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from dataclasses import dataclass, field

from ...errors import InputError
from .base import whole
from .effects import EFFECTS, Effect

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


class RuleError(InputError, ValueError):
    """A rule that cannot be stored; the message names the field."""


@dataclass(slots=True)
class Request:
    """What matching looks at. body_json is read from the body only when some rule's match needs it."""

    method: str
    path: str  # without the query
    request_id: str | None
    body: bytes | None = None
    _json: object = field(default=None, repr=False)
    _parsed: bool = field(default=False, repr=False)

    def json(self) -> dict | None:
        if not self._parsed:
            self._parsed = True
            try:
                obj = json.loads(self.body) if self.body else None
                self._json = obj if isinstance(obj, dict) else None
            except (ValueError, UnicodeDecodeError):
                self._json = None
        return self._json


@dataclass(slots=True)
class Match:
    method: str | None = None
    path: str | None = None  # exact, or a prefix when it ends in *
    model: str | None = None
    stream: bool | None = None

    def __post_init__(self):
        if self.method is not None:
            if not isinstance(self.method, str) or not self.method.isascii() or self.method.upper() not in METHODS:
                raise RuleError(f"match.method: {self.method!r} is not one of {sorted(METHODS)}")
            self.method = self.method.upper()
        if self.path is not None and (not isinstance(self.path, str) or not self.path.startswith("/")):
            raise RuleError(f"match.path: {self.path!r} must start with / (end it in * for a prefix)")
        if self.model is not None and not isinstance(self.model, str):
            raise RuleError(f"match.model: {self.model!r} must be a string")
        if self.stream is not None and not isinstance(self.stream, bool):
            raise RuleError(f"match.stream: {self.stream!r} must be true or false")

    @property
    def needs_body(self) -> bool:
        return self.model is not None or self.stream is not None

    def matches(self, req: Request) -> bool:
        if self.method is not None and req.method != self.method:
            return False
        if self.path is not None:
            if self.path.endswith("*"):
                if not req.path.startswith(self.path[:-1]):
                    return False
            elif req.path != self.path:
                return False
        if self.needs_body:
            body = req.json() or {}
            if self.model is not None and body.get("model") != self.model:
                return False
            if self.stream is not None and bool(body.get("stream", False)) != self.stream:
                return False
        return True

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("method", "path", "model", "stream") if getattr(self, k) is not None}


def _number(name: str, v, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise RuleError(f"{name}: {v!r} must be a number")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise RuleError(f"{name}: {v!r} must be from {lo} to {hi}" if hi is not None else f"{name}: {v!r} must be >= {lo}")
    return float(v)


def _int(name: str, v, lo: int | None = None) -> int:
    n = whole(v)
    if n is None or (lo is not None and n < lo):
        raise RuleError(f"{name}: {v!r} must be a whole number" + (f" >= {lo}" if lo is not None else ""))
    return n


def _object(spec: dict, name: str) -> dict:
    """spec[name], a JSON object; absent or null is {}."""
    v = spec.get(name)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise RuleError(f"{name}: must be a JSON object")
    return v


class Rule:
    """One stored rule. consider() is called once per request that reached it, in rule order."""

    KEYS = {"name", "effect", "params", "match", "probability", "seed", "occurrences", "count", "window"}

    def __init__(self, spec: dict):
        if not isinstance(spec, dict):
            raise RuleError("rule: the body must be a JSON object such as {\"name\": \"n\", \"effect\": \"status\"}")
        unknown = set(spec) - self.KEYS - {"matched", "applied"}
        if unknown:
            raise RuleError(f"{sorted(unknown)[0]}: unknown field (a rule has {sorted(self.KEYS)})")
        name = spec.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):  # match's $ would let a final newline in
            raise RuleError(f"name: {name!r} must be 1-64 letters, digits, '_', '.' or '-'")
        self.name = name
        effect = spec.get("effect")
        if not isinstance(effect, str) or effect not in EFFECTS:
            raise RuleError(f"effect: {effect!r} is not one of {sorted(EFFECTS)}")
        params = _object(spec, "params")
        try:
            self.effect: Effect = EFFECTS[effect](dict(params))
        except (ValueError, TypeError) as e:
            raise RuleError(str(e)) from None
        m = _object(spec, "match")
        bad = set(m) - {"method", "path", "model", "stream"}
        if bad:
            raise RuleError(f"match.{sorted(bad)[0]}: unknown field (match has method, path, model, stream)")
        self.match = Match(**m)
        self.probability = _number("probability", spec.get("probability", 1), 0, 1)
        self.seed = _int("seed", spec.get("seed", 0))
        occ = spec.get("occurrences")
        if occ is not None:
            if not isinstance(occ, list) or not occ:
                raise RuleError("occurrences: must be a non-empty list of 1-based request numbers, e.g. [2, 4]")
            occ = sorted({_int("occurrences[]", o, 1) for o in occ})
        self.occurrences: list[int] | None = occ
        self.count = None if spec.get("count") is None else _int("count", spec.get("count"), 1)
        w = spec.get("window")
        if w is not None:
            if not isinstance(w, dict) or set(w) - {"start", "end"}:
                raise RuleError("window: must be {\"start\": seconds, \"end\": seconds}")
            start = _number("window.start", w.get("start", 0), 0)
            end = _number("window.end", w["end"], 0) if w.get("end") is not None else math.inf  # no end
            if end <= start:
                raise RuleError(f"window.end: {end} must be after window.start {start}")
            w = {"start": start, "end": end}
        self.window: dict | None = w
        self.rng = random.Random(self.seed)
        self.added = time.monotonic()
        self.matched = 0
        self.applied = 0
        self.removed = False
        self.state: dict = {}  # an effect's own count across requests (the storm's cycle)
        self._gone: asyncio.Event | None = None

    @property
    def needs_body(self) -> bool:
        return self.match.needs_body

    def consider(self, req: Request) -> bool:
        """Count a match and say whether the effect acts on this request."""
        if self.removed or not self.match.matches(req):
            return False
        self.matched += 1
        if self.window is not None:
            elapsed = time.monotonic() - self.added
            if not self.window["start"] <= elapsed < self.window["end"]:
                return False
        if self.occurrences is not None and self.matched not in self.occurrences:
            return False
        if self.count is not None and self.applied >= self.count:
            return False
        if self.probability < 1 and self.rng.random() >= self.probability:
            return False
        if not self.effect.takes(self):
            return False
        self.applied += 1
        return True

    def remove(self) -> None:
        """Stop acting, also on requests and streams in flight (their waits on this rule end now)."""
        self.removed = True
        if self._gone is not None:
            self._gone.set()

    async def sleep(self, seconds: float) -> bool:
        """Wait up to seconds; False if the rule was removed meanwhile (the wait ends then)."""
        if self.removed:
            return False
        if seconds <= 0:
            return True
        if self._gone is None:
            self._gone = asyncio.Event()
        try:
            await asyncio.wait_for(self._gone.wait(), seconds)
            return False
        except TimeoutError:
            return not self.removed

    def to_dict(self) -> dict:
        out = {"name": self.name, "effect": self.effect.name, "params": self.effect.params,
               "match": self.match.to_dict(), "probability": self.probability, "seed": self.seed}
        if self.occurrences is not None:
            out["occurrences"] = self.occurrences
        if self.count is not None:
            out["count"] = self.count
        if self.window is not None:
            out["window"] = {k: (None if v == math.inf else v) for k, v in self.window.items()}
        out["matched"], out["applied"] = self.matched, self.applied
        return out
