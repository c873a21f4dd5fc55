"""JSON Schema building blocks that the experiment schema (chaos.experiment.schema) and the fault classes
(chaos.faults, each declaring its own settings) share.

It imports nothing of the toolkit: chaos.experiment imports chaos.faults, so what both need lives below both.
"""

from __future__ import annotations

WEEK = 7 * 24 * 3600


def duration(positive: bool = False, maximum: float = WEEK) -> dict:
    """A duration: a number of seconds, or text such as 30s, 2m, 1h, 250ms. Text is range-checked by x-chaos."""
    span = f"{maximum:g}s" if maximum < 86400 else f"{maximum / 86400:g} days ({maximum:g}s)"
    low = "above 0 and at most" if positive else "from 0 to"
    text = f"a duration {low} {span}: 30s, 2m, 1h, 250ms, or seconds"
    number = {"type": "number", "maximum": maximum, **({"exclusiveMinimum": 0} if positive else {"minimum": 0})}
    return {"description": text,
            "anyOf": [number, {"type": "string", "pattern": r"^\s*\d{1,12}(\.\d{1,9})?\s*(ms|s|m|h)?\s*$"}],
            "x-chaos": {"kind": "duration", "min": 0, "max": maximum, "exclusive_min": positive, "text": text}}


def percent(positive: bool = False) -> dict:
    low = "above 0% and at most" if positive else "from 0% to"
    text = f"a fraction {low} 100%: 0.1%, 50%, or a number from 0 to 1"
    number = {"type": "number", "maximum": 1, **({"exclusiveMinimum": 0} if positive else {"minimum": 0})}
    return {"description": text,
            "anyOf": [number, {"type": "string", "pattern": r"^\s*\d{1,12}(\.\d{1,9})?\s*%\s*$"}],
            "x-chaos": {"kind": "percent", "min": 0, "max": 1, "exclusive_min": positive, "text": text}}


def integer(minimum: int, maximum: int, description: str = "") -> dict:
    d = {"type": "integer", "minimum": minimum, "maximum": maximum}
    return {**d, "description": description} if description else d


def number(minimum: float, maximum: float, exclusive: bool = False) -> dict:
    return {"type": "number", "maximum": maximum,
            **({"exclusiveMinimum": minimum} if exclusive else {"minimum": minimum})}


def obj(props: dict, required: list[str] | None = None, description: str = "") -> dict:
    d = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        d["required"] = required
    if description:
        d["description"] = description
    return d


DURATION = duration()
POSITIVE = duration(positive=True)  # a window, a timeout, a period: zero would mean nothing
PERCENT = percent()
BOOL = {"type": "boolean"}
INSTANCE = {"description": "an instance index (0-based), random, or a replica id such as r1 or b0",
            "anyOf": [integer(0, 15), {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]{0,31}$"}]}
LINK = {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]{0,31}$",
        "description": "a link of the target: client (in front of the whole target) or an instance id such as r1 "
                       "(in front of that instance; behind a gateway, the gateway's way to it)"}
