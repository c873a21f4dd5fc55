"""The limits a vendor target file states (`limits:` of an openai target): what the load is capped to
(chaos.load.limits) so that a chaos run is never the reason a vendor blocks the key."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class Limits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # prompt + max_tokens of every request, as the load can bound them
    max_concurrency: int | None = None  # requests in flight at once
    max_output_tokens: int | None = None  # the largest max_tokens a request may ask for

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"limits.{f.name} must be a whole number of at least 1, got {v!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "Limits | None":
        """The target file's limits: mapping (already schema-checked), or None when it states none."""
        if not d:
            return None
        return cls(**{f.name: d.get(f.name) for f in fields(cls)})

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def describe(self) -> str:
        names = {"requests_per_minute": "requests/min", "tokens_per_minute": "tokens/min",
                 "max_concurrency": "in flight", "max_output_tokens": "max_tokens"}
        return ", ".join(f"{v:,} {names[k]}" for k, v in self.to_dict().items()) or "none"
