"""Where the fields are in a log of another shape: dotted paths into each JSON line."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .times import UNITS

_MISSING = object()


@dataclass(slots=True)
class LogMapping:
    """Dotted paths into each JSON line ("params.max_new_tokens"; a number indexes a list: "messages.0").

    body names an OpenAI body to start from; prompt / messages / max_tokens then override its fields.
    A line needs prompt or messages (or a body holding one of them); everything else is optional.
    """

    time: str | None = None
    time_unit: str = "s"  # s | ms | us | ns | iso (an ISO date without a zone is UTC)
    prompt: str | None = None
    messages: str | None = None
    max_tokens: str | None = None
    body: str | None = None
    status: str | None = None
    error_code: str | None = None
    input_tokens: str | None = None
    output_tokens: str | None = None
    endpoint: str | None = None  # a value holding "chat" means chat (a URL path will do)
    headers: str | None = None
    case: str | None = None

    def __post_init__(self):
        if self.time_unit not in UNITS:
            raise ValueError(f"mapping time_unit must be one of {UNITS}, not {self.time_unit!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "time_unit" and v is not None and (not isinstance(v, str) or not v.strip(".")):
                raise ValueError(f"mapping {f.name!r} must be a dotted path like 'input.text', not {v!r}")
        if not (self.prompt or self.messages or self.body):
            raise ValueError("the mapping needs 'prompt', 'messages' or 'body': where the request's text is")

    @classmethod
    def of(cls, mapping: dict | LogMapping) -> LogMapping:
        if isinstance(mapping, LogMapping):
            return mapping
        if not isinstance(mapping, dict):
            raise ValueError(f"mapping must be a dict of field: dotted path, not {type(mapping).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"unknown mapping keys {unknown}; the keys are {sorted(known)}")
        return cls(**mapping)


def get_path(obj, path: str, default=None):
    """The value at a dotted path, or default when any step is missing."""
    for step in path.split("."):
        if isinstance(obj, dict):
            obj = obj.get(step, _MISSING)
        elif isinstance(obj, list) and step.lstrip("-").isdigit():
            i = int(step)
            obj = obj[i] if -len(obj) <= i < len(obj) else _MISSING
        else:
            return default
        if obj is _MISSING:
            return default
    return obj
