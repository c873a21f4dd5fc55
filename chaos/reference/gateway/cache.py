"""A bounded answer cache for the last-resort fallback, keyed on the normalised request."""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass

IGNORED = {"stream", "stream_options", "user", "n"}


def cache_key(path: str, body: dict) -> str | None:
    """Same question, same key: field order, streaming and the user tag do not matter. None: not cacheable
    (nested deeper than the encoder goes; the replica judges such a body)."""
    norm = {k: v for k, v in body.items() if k not in IGNORED}
    try:
        text = json.dumps(norm, sort_keys=True, separators=(",", ":"))
    except (RecursionError, ValueError):
        return None
    return hashlib.sha256((path + text).encode()).hexdigest()


@dataclass(slots=True)
class Answer:
    text: str
    finish_reason: str
    usage: dict
    model: str
    stored_at: float
    parse: object = None  # a function giving (text, finish_reason, usage, model) or None, until it is first needed

    @classmethod
    def of(cls, answer, model: str, stored_at: float) -> "Answer":
        """From a (text, finish_reason, usage, model) tuple, or a function that parses one out later."""
        if callable(answer):
            return cls("", "stop", {}, model, stored_at, answer)
        text, finish, usage, got = answer
        return cls(text, finish, usage, got or model, stored_at)

    def resolved(self) -> bool:
        """Parse what was deferred; False when it was no answer after all."""
        if self.parse is None:
            return True
        got, self.parse = self.parse(), None
        if got is None:
            return False
        self.text, self.finish_reason, self.usage, model = got
        self.model = model or self.model
        return True


class AnswerCache:
    def __init__(self, size: int, ttl_s: float, clock=time.monotonic):
        self.size, self.ttl_s, self.clock = size, ttl_s, clock
        self._items: OrderedDict[str, Answer] = OrderedDict()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: str | None, answer: Answer) -> None:
        if self.size == 0 or key is None:
            return
        self._items[key] = answer
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, key: str | None) -> Answer | None:
        a = self._items.get(key) if key is not None else None
        if a is None or self.clock() - a.stored_at > self.ttl_s or not a.resolved():
            self.misses += 1
            if a is not None:
                del self._items[key]
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return a
