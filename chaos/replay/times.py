"""Timestamps of the logs and traces as exact (whole seconds, fraction) pairs.

A float of epoch seconds has a resolution of ~0.24 us in 2023; the Azure traces state 100 ns, and datetime
keeps only microseconds, so the fraction is parsed by hand and offsets are whole-second differences plus
fraction differences.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

UNITS = ("s", "ms", "us", "ns", "iso")
_FRACTION = re.compile(r"^(?P<head>[^.,]*[T ]\d\d:\d\d:\d\d)[.,](?P<frac>\d+)(?P<tail>.*)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_SECOND = timedelta(seconds=1)
_MAX_SECONDS = 10 ** 12  # ~31,700 years either side of the epoch: offsets stay finite floats


def _show(value) -> str:
    """A value for an error message: short (a hostile log's time field may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


Stamp = tuple[int, float]  # whole seconds since the epoch (or since any origin), fraction in [0, 1)


def parse_iso(text: str) -> Stamp:
    """An ISO 8601 date-time (a space or T between date and time, any number of fractional digits);
    without a zone it is UTC."""
    text = text.strip()
    frac = 0.0
    m = _FRACTION.match(text)
    if m:
        digits = m["frac"]
        frac = int(digits) / 10 ** len(digits)
        text = m["head"] + m["tail"]
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time {_show(text)} is not an ISO date-time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    whole = (dt - _EPOCH) // _ONE_SECOND
    return whole, frac


def parse_time(value, unit: str) -> Stamp:
    """A time field in the given unit: a number (or a numeric string) of s/ms/us/ns, or an ISO string."""
    if unit not in UNITS:
        raise ValueError(f"time unit must be one of {UNITS}, not {unit!r}")
    if isinstance(value, bool) or value is None:
        raise ValueError(f"time is {value!r}, not a number or a date")
    if unit == "iso" or (isinstance(value, str) and not _is_number(value)):
        if not isinstance(value, str):
            raise ValueError(f"time {_show(value)} is a number but the unit is 'iso'")
        return parse_iso(value)
    if isinstance(value, str):
        value = float(value) if any(c in value for c in ".eE") else int(value)
    if not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"time {_show(value)} is not a finite number")
    scale = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    if isinstance(value, int):
        whole, rest = divmod(value, scale)
        frac = rest / scale
    else:
        seconds = value / scale
        whole = int(seconds // 1)
        frac = seconds - whole
    if abs(whole) > _MAX_SECONDS:
        raise ValueError(f"time {_show(value)} {unit} is out of range (over {_MAX_SECONDS} s from its origin)")
    return whole, frac


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def offset(stamp: Stamp, origin: Stamp) -> float:
    return (stamp[0] - origin[0]) + (stamp[1] - origin[1])
