"""Filters: select Items of a stream by the logged status, error code, failure and prompt size."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .model import Item, Problem
from .synth import count_body


def item_tokens(item: Item) -> int | None:
    """The item's prompt size: as the source states it, else the reference server's count of its body."""
    return item.input_tokens if item.input_tokens is not None else count_body(item.body)


def _status_match(want, status: int | None) -> bool:
    if status is None:
        return False
    for w in want:
        if isinstance(w, int) and status == w:
            return True
        if isinstance(w, str) and len(w) == 3 and w[1:].lower() == "xx" and str(status)[:1] == w[0]:
            return True
    return False


def _as_tuple(v) -> tuple:
    return (v,) if isinstance(v, (int, str)) else tuple(v)


def select(items: Iterable[Item | Problem], status=None, min_tokens: int | None = None,
           max_tokens: int | None = None, error_code=None, failed: bool | None = None,
           keep_problems: bool = True) -> Iterator[Item | Problem]:
    """Items that pass every filter given, streamed.

    status: an int (400), a class ("4xx") or a collection of them; items without a logged status never match.
    error_code: a code or a collection of codes ("context_length_exceeded"). min_tokens / max_tokens bound the
    prompt size (item_tokens; inclusive; an item whose size is unknown is dropped by a size filter).
    failed: True keeps only failed requests, False only successful ones. Problems pass through unless
    keep_problems is False, so the caller still counts the lines it could not read.
    """
    statuses = _as_tuple(status) if status is not None else None
    codes = set(_as_tuple(error_code)) if error_code is not None else None
    for s in statuses or ():
        if not (isinstance(s, int) or (isinstance(s, str) and len(s) == 3 and s[0] in "12345"
                                       and s[1:].lower() == "xx")):
            raise ValueError(f"status filter {s!r}: give an int (400) or a class like '4xx'")
    for name, v in (("min_tokens", min_tokens), ("max_tokens", max_tokens)):
        if v is not None and (not isinstance(v, int) or v < 0):
            raise ValueError(f"{name} must be a non-negative int, not {v!r}")
    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        raise ValueError(f"min_tokens {min_tokens} is above max_tokens {max_tokens}: nothing would pass")
    for it in items:
        if isinstance(it, Problem):
            if keep_problems:
                yield it
            continue
        if statuses is not None and not _status_match(statuses, it.status):
            continue
        if codes is not None and it.error_code not in codes:
            continue
        if failed is not None and it.failed != failed:
            continue
        if min_tokens is not None or max_tokens is not None:
            n = item_tokens(it)
            if n is None or (min_tokens is not None and n < min_tokens) or (
                    max_tokens is not None and n > max_tokens):
                continue
        yield it


_FILTER_KEYS = ("status", "error_code", "min_input_tokens", "max_input_tokens")


class ReplayFilter:
    """The replay's line filter, from a dict ({"status": [400, "5xx"], "error_code": [...], "min_input_tokens": 10,
    "max_input_tokens": 2000}) or the command line's text ("status=400,500 min_input_tokens=10"). match(item) is
    select()'s test for one item; every value is checked when the filter is made, before anything is read."""

    __slots__ = ("status", "error_code", "min_tokens", "max_tokens")

    def __init__(self, status=None, error_code=None, min_input_tokens=None, max_input_tokens=None):
        self.status = _as_tuple(status) if status is not None else None
        self.error_code = _as_tuple(error_code) if error_code is not None else None
        self.min_tokens, self.max_tokens = min_input_tokens, max_input_tokens
        if isinstance(min_input_tokens, int) and isinstance(max_input_tokens, int) and min_input_tokens > max_input_tokens:
            raise ValueError(f"min_input_tokens {min_input_tokens} is above max_input_tokens {max_input_tokens}: "
                             "no line would pass the replay filter")
        next(select([], self.status, self.min_tokens, self.max_tokens, self.error_code), None)  # validates

    @classmethod
    def of(cls, d: dict | None) -> "ReplayFilter | None":
        if not d:
            return None
        if not isinstance(d, dict):
            raise ValueError(f"a replay filter is a mapping of {', '.join(_FILTER_KEYS)}, not {d!r}")
        unknown = sorted(set(d) - set(_FILTER_KEYS))
        if unknown:
            raise ValueError(f"unknown replay filter key(s) {', '.join(unknown)}: use {', '.join(_FILTER_KEYS)}")
        return cls(**d)

    @classmethod
    def parse(cls, text: str) -> "ReplayFilter | None":
        """'status=400,5xx error_code=context_length_exceeded min_input_tokens=10 max_input_tokens=2000'."""
        d: dict = {}
        for part in (text or "").split():
            key, eq, value = part.partition("=")
            if not eq or not value:
                raise ValueError(f"replay filter {part!r}: write KEY=VALUE with KEY one of {', '.join(_FILTER_KEYS)}")
            if key in ("min_input_tokens", "max_input_tokens"):
                try:
                    d[key] = int(value)
                except ValueError:
                    raise ValueError(f"replay filter {key}={value}: give a whole number of tokens") from None
            elif key == "status":
                d[key] = [int(v) if v.isdigit() else v for v in value.split(",") if v]
            else:
                d[key] = [v for v in value.split(",") if v]
        return cls.of(d)

    def to_dict(self) -> dict:
        d = {"status": list(self.status) if self.status else None,
             "error_code": list(self.error_code) if self.error_code else None,
             "min_input_tokens": self.min_tokens, "max_input_tokens": self.max_tokens}
        return {k: v for k, v in d.items() if v is not None}

    def match(self, item: Item) -> bool:
        return next(select([item], self.status, self.min_tokens, self.max_tokens, self.error_code), None) is not None

    def __str__(self) -> str:
        return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in self.to_dict().items())
