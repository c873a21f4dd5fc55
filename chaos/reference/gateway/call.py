"""One client request at the gateway (Call) and a whole answer to it (Reply); a streamed answer is an
h1server.StreamOut the handler writes as the tokens come."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..h1server import StreamOut


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

    def __init__(self, reader, writer, head, path: str, framing: tuple[str, int], keep: bool, rid: str):
        self.reader, self.writer, self.head, self.path = reader, writer, head, path
        self.method, _, self.version = head.first
        self.framing, self.keep, self.rid = framing, keep, rid
        self.body_read = framing[0] == "none" or framing == ("length", 0)
        self.out: StreamOut | None = None

    def stream(self, status: int, headers: dict) -> StreamOut:
        """The streamed answer; its head goes out with the first write."""
        self.out = StreamOut(self.writer, status, list(headers.items()), self.version, self.keep)
        return self.out
