"""Toxic definitions: the JSON a client sends and gets back, parsed and validated like toxiproxy-server 2.12.

A Toxic is the configuration shared by every connection of its proxy; what a toxic does to bytes lives in
stages.py (one state object per connection and direction).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ...errors import ServiceError

UPSTREAM = "upstream"      # client -> server
DOWNSTREAM = "downstream"  # server -> client

# Attribute names per type, in the order toxiproxy-server writes them (its Go struct field order).
TYPES: dict[str, tuple[str, ...]] = {
    "noop": (),
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
}

_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class ApiError(ServiceError):
    """An error with the HTTP status and the message toxiproxy-server would answer with."""

    def __init__(self, message: str, status: int, extra: dict | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.extra = extra or {}


def bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def parse_json(raw: bytes):
    """The first JSON value of a body, with Go's wording for an empty or broken one."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise bad_body("EOF")
    try:
        value, _end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        raise bad_body(f"invalid JSON: {e.msg} at offset {e.pos}") from None
    return value


def _go_type(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def unmarshal_error(value, where: str, want: str) -> ApiError:
    shown = value if isinstance(value, (int, float)) and not isinstance(value, bool) else _go_type(value)
    return bad_body(f"json: cannot unmarshal {shown} into Go struct field {where} of type {want}")


def _get(obj: dict, key: str, where: str, default, kind: type, go_type: str):
    # Go leaves a field that is missing or null at its default, and rejects any other type
    if key not in obj or obj[key] is None:
        return default
    v = obj[key]
    if not isinstance(v, kind):
        raise unmarshal_error(v, where, go_type)
    return v


def get_str(obj: dict, key: str, where: str, default: str = "") -> str:
    return _get(obj, key, where, default, str, "string")


def get_bool(obj: dict, key: str, where: str, default: bool) -> bool:
    return _get(obj, key, where, default, bool, "bool")


def _int64(v, where: str) -> int:
    # Go decodes these into int64: a fraction, a string or a bool is a type error, not a rounding
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise unmarshal_error(v, where, "int64")
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        raise unmarshal_error(v, where, "int64")
    iv = int(v)
    if not _INT64[0] <= iv <= _INT64[1]:
        raise unmarshal_error(v, where, "int64")
    return iv


def _toxicity(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise unmarshal_error(v, "ToxicWrapper.toxicity", "float32")
    return float(v)


def parse_direction(stream: str) -> str:
    s = stream.lower()
    if s in (UPSTREAM, DOWNSTREAM):
        return s
    raise ApiError("stream was invalid, can be either upstream or downstream", 400)


@dataclass(slots=True)
class Toxic:
    """One toxic of a proxy. `attributes` always holds every attribute of its type (missing ones are 0)."""

    name: str
    type: str
    stream: str = DOWNSTREAM  # as the client wrote it; `direction` is the parsed form
    toxicity: float = 1.0
    attributes: dict[str, int] = field(default_factory=dict)
    direction: str = DOWNSTREAM

    def __post_init__(self):
        if self.type not in TYPES:
            raise ApiError("invalid toxic type", 400)
        self.direction = parse_direction(self.stream)
        if not math.isfinite(self.toxicity):
            raise ApiError(f"toxicity {self.toxicity!r} is not a number: give 0 to 1", 400)
        full = {k: 0 for k in TYPES[self.type]}
        for k, v in self.attributes.items():
            if k in full:
                full[k] = _int64(v, f"{self.type}.{k}")
        self.attributes = full

    def attr(self, key: str) -> int:
        return self.attributes.get(key, 0)

    def to_json(self) -> dict:
        t = self.toxicity
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": int(t) if t == int(t) else t, "attributes": dict(self.attributes)}

    @classmethod
    def from_json(cls, body) -> "Toxic":
        """Parse a create body in toxiproxy-server's order of checks: body, stream, name, type, attributes."""
        if not isinstance(body, dict):
            raise unmarshal_error(body, "ToxicWrapper", "toxics.ToxicWrapper")
        stream = get_str(body, "stream", "ToxicWrapper.stream", DOWNSTREAM)
        ttype = get_str(body, "type", "ToxicWrapper.type")
        name = get_str(body, "name", "ToxicWrapper.name")
        toxicity = _toxicity(body["toxicity"]) if body.get("toxicity") is not None else 1.0
        attrs = body.get("attributes")
        if attrs is not None and not isinstance(attrs, dict):
            raise unmarshal_error(attrs, "attributes", f"toxics.{ttype}")
        parse_direction(stream)
        name = name or f"{ttype}_{stream}"
        if ttype not in TYPES:
            raise ApiError("invalid toxic type", 400)
        return cls(name=name, type=ttype, stream=stream, toxicity=toxicity, attributes=attrs or {})

    def updated(self, body) -> "Toxic":
        """A copy with a PATCH body merged in: attributes merge, toxicity replaces; name/type/stream stay."""
        if not isinstance(body, dict):
            raise unmarshal_error(body, "attributes", f"toxics.{self.type}")
        attrs = body.get("attributes")
        if attrs is not None and not isinstance(attrs, dict):
            raise unmarshal_error(attrs, "attributes", f"toxics.{self.type}")
        merged = dict(self.attributes)
        merged.update(attrs or {})
        toxicity = _toxicity(body["toxicity"]) if body.get("toxicity") is not None else self.toxicity
        return Toxic(name=self.name, type=self.type, stream=self.stream, toxicity=toxicity, attributes=merged)
