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
        if a is None or self.clock() - a.stored_at > self.ttl_s:
            self.misses += 1
            if a is not None:
                del self._items[key]
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return a
