"""A fault's settings, typed: one dataclass per fault type, its JSON Schema derived from its fields.

Each field is made with `setting(schema, default)`: the schema of that setting (chaos.schemabits) and its default;
a setting with no default is required. The loader builds a fault's Params once, from its mapping (already valid
against the schema), turning durations into seconds and percentages into fractions by their schemas' kind, so a
fault reads `self.spec.params.restart_after`, a float or None, and never parses.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, make_dataclass

import jsonschema

from ..common import parse_duration, parse_percent
from ..errors import InputError
from ..schemabits import obj

CONVERT = {"duration": parse_duration, "percent": parse_percent}  # by a schema's x-chaos kind


class ParamsError(InputError, ValueError):
    """A fault's settings that its Params cannot take (a name it has not, a required one missing, a value out of
    range): the experiment schema refuses these first, so this is met by code that builds a Params itself."""


def setting(schema: dict, default=MISSING):
    """A field of a fault's Params: its JSON Schema, and its default (none: the setting is required)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"schema": schema})
    return field(default=default, metadata={"schema": schema})


def _kind(schema: dict) -> str | None:
    return (schema.get("x-chaos") or {}).get("kind")


@dataclass(slots=True, frozen=True, kw_only=True)
class Params:
    """The settings a fault of no settings takes: none. Fault types subclass it, adding fields made by setting()."""

    def __post_init__(self):
        # Built by the loader from a mapping the schema passed, this holds by construction; built by hand (a test,
        # a plugin, a caller of the API) it is where a bad value stops. Durations and percentages are numbers by
        # now, which their schemas take.
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None or f.default is not None:
                try:
                    jsonschema.Draft202012Validator(f.metadata["schema"]).validate(v)
                except jsonschema.ValidationError as e:
                    raise ParamsError(f"{type(self).__name__}.{f.name}: {e.message}") from None

    @classmethod
    def schema(cls, description: str = "") -> dict:
        """The JSON Schema of a fault's settings (the experiment schema adds type, at and name)."""
        fs = fields(cls)
        required = [f.name for f in fs if f.default is MISSING and f.default_factory is MISSING]
        return obj({f.name: f.metadata["schema"] for f in fs}, required, description)

    @classmethod
    def build(cls, raw: dict) -> Params:
        """From a fault's mapping without type, at and name: durations in seconds, percentages as fractions."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ParamsError(f"{cls.__name__} has no setting {', '.join(unknown)}",
                              hint=f"its settings are {', '.join(known) or 'none'}")
        missing = [name for name in cls.schema().get("required", []) if name not in raw]
        if missing:
            raise ParamsError(f"{cls.__name__} needs {', '.join(missing)}")
        typed = {}
        for name, v in raw.items():
            convert = CONVERT.get(_kind(known[name].metadata["schema"]))
            try:
                typed[name] = convert(v) if convert and v is not None else v
            except ValueError as e:
                raise ParamsError(f"{cls.__name__}.{name}: {e}") from None
        return cls(**typed)

    def to_dict(self) -> dict:
        """The settings that are set (None: not set), in seconds and fractions: what --dry-run shows."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


def params_from_table(name: str, base: type[Params], schemas: dict[str, dict], required: list[str]) -> type[Params]:
    """The Params of a fault type whose own settings a table gives (a network toxic's, an LLM fault's): base's
    fields, then one per setting, None when not set."""
    return make_dataclass(name, [(k, object, setting(schema) if k in required else setting(schema, None))
                                 for k, schema in schemas.items()],
                          bases=(base,), slots=True, frozen=True, kw_only=True)
