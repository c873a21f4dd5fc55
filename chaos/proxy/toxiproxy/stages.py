"""What each toxic does to one direction of one connection.

A chunk is planned through the chain in virtual time: each stage maps a list of (release time, bytes) to
another, so a chain of N toxics costs one task per direction instead of N tasks and queues, and a stream
is shifted rather than stretched (latency counts from when a chunk arrived, as toxiproxy-server does).
Stages read their Toxic's attributes on every chunk, so an update applies to the next chunk.
"""

from __future__ import annotations

import random

from .toxics import Toxic

Items = list[tuple[float, bytes]]


class Stage:
    """Default: pass data through untouched (noop, slow_close)."""

    __slots__ = ("toxic",)

    def __init__(self, toxic: Toxic, now: float):
        self.toxic = toxic

    def apply(self, items: Items, pipe) -> Items:
        return items

    def deadline(self) -> float | None:
        """When this stage wants the connection closed (timeout) or reset (reset_peer), if it does."""
        return None

    def eof_delay(self) -> float:
        return 0.0


class _InOrder(Stage):
    """A stage that holds chunks back keeps them in order: none is released before the one planned ahead of it."""

    __slots__ = ("last",)  # when the last chunk planned is released

    def __init__(self, toxic, now):
        super().__init__(toxic, now)
        self.last = 0.0


class Latency(_InOrder):
    def apply(self, items, pipe):
        out = []
        for t, data in items:
            lat, jit = self.toxic.attr("latency"), self.toxic.attr("jitter")
            delay = lat + (random.uniform(-jit, jit) if jit > 0 else 0)
            # counted from the chunk's arrival; max() keeps chunks in order (they bunch under jitter)
            self.last = max(t + max(delay, 0) / 1000, self.last)
            out.append((self.last, data))
        return out


class Bandwidth(_InOrder):
    def apply(self, items, pipe):
        rate = self.toxic.attr("rate")  # KB/s, KB = 1000 B
        if rate <= 0:
            return items
        bps = rate * 1000.0
        piece = max(1, int(bps / 10))  # 100 ms worth: the data trickles instead of arriving in a lump
        out = []
        for t, data in items:
            start = max(t, self.last)
            for i in range(0, len(data), piece):
                part = data[i:i + piece]
                start += len(part) / bps
                out.append((start, part))
            self.last = start
        return out


class Slicer(Stage):
    def apply(self, items, pipe):
        avg = self.toxic.attr("average_size")
        if avg <= 0:
            return items
        var = max(0, min(self.toxic.attr("size_variation"), avg - 1))
        gap = max(0, self.toxic.attr("delay")) / 1e6  # microseconds
        out = []
        for t, data in items:
            i = 0
            while i < len(data):
                size = avg + (random.randint(-var, var) if var else 0)
                out.append((t, data[i:i + size]))
                i += size
                t += gap
        return out


class LimitData(Stage):
    __slots__ = ("seen",)

    def __init__(self, toxic, now):
        super().__init__(toxic, now)
        self.seen = 0  # per connection and direction: it spans keep-alive requests

    def apply(self, items, pipe):
        limit = self.toxic.attr("bytes")
        out = []
        for t, data in items:
            left = limit - self.seen
            if left <= 0:
                pipe.close_after_write = True
                break
            part = data[:left]
            self.seen += len(part)
            out.append((t, part))
            if self.seen >= limit:
                pipe.close_after_write = True
                break
        return out


class Timeout(Stage):
    __slots__ = ("last",)

    def __init__(self, toxic, now):
        super().__init__(toxic, now)
        self.last = now  # a client that sends nothing is closed too

    def apply(self, items, pipe):
        if items:
            self.last = max(self.last, max(t for t, _ in items))  # each chunk restarts the timer
        return []  # swallowed

    def deadline(self):
        ms = self.toxic.attr("timeout")
        return self.last + ms / 1000 if ms > 0 else None  # 0 holds the connection until removed


class ResetPeer(Stage):
    __slots__ = ("first", "fin")

    def __init__(self, toxic, now):
        super().__init__(toxic, now)
        self.first: float | None = None  # a silent peer is never reset
        self.fin = False  # added to an open connection: toxiproxy-server closes those with FIN, not RST

    def apply(self, items, pipe):
        if items and self.first is None:
            self.first = items[0][0]
        return []

    def deadline(self):
        if self.first is None:
            return None
        return self.first + max(0, self.toxic.attr("timeout")) / 1000


class SlowClose(Stage):
    def eof_delay(self):
        return max(0, self.toxic.attr("delay")) / 1000


STAGES: dict[str, type[Stage]] = {
    "noop": Stage, "latency": Latency, "bandwidth": Bandwidth, "slicer": Slicer, "limit_data": LimitData,
    "timeout": Timeout, "reset_peer": ResetPeer, "slow_close": SlowClose,
}


def new_stage(toxic: Toxic, now: float) -> Stage:
    return STAGES[toxic.type](toxic, now)
