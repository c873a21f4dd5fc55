"""One client request at the gateway (Call) and a whole answer to it (Reply); a streamed answer is an
http1.server.StreamOut the handler writes as the tokens come."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from ...http1.server import StreamOut
from ...http1.wire import take_whole


def new_rid() -> str:
    """The id of a request that brought no x-request-id: 128 bits from the process's PRNG, unique rather than
    secret (uuid4 asks the kernel for its bits: a system call on every request's first token)."""
    return "%032x" % random.getrandbits(128)


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict | None = None
    content_type: str | None = "application/json"

    @classmethod
    def json(cls, obj, status: int = 200, headers: dict | None = None) -> Reply:
        return cls(status, json.dumps(obj).encode(), headers)


class Call:
    """What the handlers need of a request: its head, where its body is, whether the connection may be kept, and
    the answer once one has begun (out)."""

    __slots__ = ("body_read", "framing", "head", "keep", "method", "out", "path", "reader", "rid", "version",
                 "writer")

    def __init__(self, reader, writer, head, path: str, keep: bool, rid: str):
        self.reader, self.writer, self.head, self.path = reader, writer, head, path
        self.method, _, self.version = head.first
        self.keep, self.rid = keep, rid
        self.framing, self.body_read = ("none", 0), True
        self.out: StreamOut | None = None

    def expect_body(self, framing: tuple[str, int]) -> None:
        """The body framing the head says (http1.body_framing); a body, if there is one, is unread until read."""
        self.framing = framing
        self.body_read = framing[0] == "none" or framing == ("length", 0)

    def drop_buffered_body(self) -> None:
        """A body refused unread (a 429, a wrong Content-Type) that has all arrived already is taken off the
        connection, which then serves the client's next request: a refusal should not cost it a reconnect. One
        still on its way is not waited for: the connection closes after the answer (http1.server.linger)."""
        if not self.body_read and take_whole(self.reader, self.framing) is not None:
            self.body_read = True

    def stream(self, status: int, headers: dict) -> StreamOut:
        """The streamed answer; its head goes out with the first write."""
        self.out = StreamOut(self.writer, status, list(headers.items()), self.version, self.keep)
        return self.out
