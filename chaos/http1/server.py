"""The listening side on wire.py: one task per client connection, each request head within a deadline, and a
request's task cancelled the moment its client leaves. What the gateway and the LLM fault proxy listen with (a
replica listens with aiohttp, serving.py).

Why not aiohttp's server here: a relay's cost per request is on every stream's first token. aiohttp's server (the
request object, middlewares, the read-deadline guard serving.py must add) cost the gateway ~0.3 ms of CPU per
request more than this loop costs the LLM proxy (BENCHMARKS section 5); with many streams starting together,
each waits for the requests ahead of it.

A handler gets (reader, writer, head) and returns whether the connection may serve another request. It reads the
body itself (read_whole), or leaves it: an unread body means the connection is closed after the answer, never
reused out of step.
"""

from __future__ import annotations

import asyncio
import json

from ..common import error_type_for, openai_error
from .wire import (HEAD_LIMIT, LAST_CHUNK, HTTPError, buffered, chunk, encode_head, read_body, read_head, take_whole,
                    too_large)

MAX_REQUESTS = 100_000  # per client connection
LINGER_S = 10.0  # after refusing a body it has not read: how long its bytes are read and dropped, at most
LINGER_IDLE_S = 1.0  # ... and how long a pause in them ends that early
REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
           413: "Content Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
           505: "HTTP Version Not Supported"}
# error.code of what parsing refuses (the reference server's words where it has them)
CODES = {400: "invalid_http_request", 408: "request_timeout", 413: "request_too_large", 431: "request_head_too_large",
         505: "http_version_not_supported"}


class Connection(asyncio.StreamReaderProtocol):
    """A client's connection. When the client goes (FIN or reset) while a request is in flight, that request's
    task is cancelled at once: its upstream request is abandoned, that connection closed, never pooled."""

    def __init__(self, cb):
        super().__init__(asyncio.StreamReader(limit=HEAD_LIMIT), cb)
        self.task: asyncio.Task | None = None
        self.busy = False
        self.gone = False
        self.on_data = None  # called once, at the next bytes to arrive: an idle connection's next head begins

    def data_received(self, data):
        if self.on_data is not None:
            cb, self.on_data = self.on_data, None
            cb()
        super().data_received(data)

    def _left(self):
        self.gone = True
        if self.busy and self.task is not None:
            self.busy = False
            self.task.cancel()

    def eof_received(self):
        out = super().eof_received()
        self._left()
        return out

    def connection_lost(self, exc):
        super().connection_lost(exc)
        self._left()


def quiet(writer: asyncio.StreamWriter) -> None:
    """We are about to close this client's connection ourselves: that is not the client leaving."""
    writer.transport.get_protocol().busy = False


def error_body(status: int, message: str, code: str | None = None) -> dict:
    return openai_error(message, error_type_for(status), code or CODES.get(status))


async def send(writer: asyncio.StreamWriter, status: int, body: bytes = b"", headers=(), keep: bool = True,
               content_type: str | None = "application/json", head_only: bool = False) -> None:
    """One whole answer. head_only: the answer to a HEAD, the same head and no body (RFC 9110 9.3.2)."""
    hs = []
    if status != 204:
        if content_type is not None:
            hs.append(("Content-Type", content_type))
        hs.append(("Content-Length", str(len(body))))
    hs += headers
    if not keep:
        hs.append(("Connection", "close"))
    writer.write(encode_head(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", hs) + (b"" if head_only else body))
    await writer.drain()


async def send_json(writer, status: int, obj, keep: bool, headers=(), head_only: bool = False) -> None:
    await send(writer, status, b"" if obj is None else json.dumps(obj).encode(), headers, keep,
               None if obj is None else "application/json", head_only)


class StreamOut:
    """A streamed answer: its head goes out with its first data, in one send; chunked to an HTTP/1.1 client, to the
    connection's close for an HTTP/1.0 one."""

    __slots__ = ("chunked", "head", "writer")

    def __init__(self, writer, status: int, headers: list[tuple[str, str]], version: str, keep: bool):
        self.writer, self.chunked = writer, version == "HTTP/1.1"
        hs = list(headers)
        if self.chunked:
            hs.append(("Transfer-Encoding", "chunked"))
        if not keep or not self.chunked:
            hs.append(("Connection", "close"))
        self.head = encode_head(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", hs)

    @property
    def started(self) -> bool:
        return self.head is None

    def _frame(self, data: bytes, last: bool) -> bytes:
        out = (chunk(data) if data else b"") + (LAST_CHUNK if last else b"") if self.chunked else data
        if self.head is not None:
            out, self.head = self.head + out, None
        return out

    def push(self, data: bytes, last: bool = False) -> None:
        """Write without waiting (a relay's read callback): the caller watches the transport's buffer."""
        self.writer.write(self._frame(data, last))

    async def write(self, data: bytes) -> None:
        self.writer.write(self._frame(data, False))
        await self.writer.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        self.writer.write(self._frame(data, True))
        await self.writer.drain()


async def read_whole(reader, framing: tuple[str, int], limit: int, timeout: float, flag: str = "body timeout"):
    """A request body held whole (None when there is none), within timeout; HTTPError 413 past limit (from the
    Content-Length before any byte is read, from a chunk's size line before that chunk is), 408 past timeout,
    400 on bad chunked framing."""
    if framing[0] == "none":
        return None
    if framing[0] == "length" and framing[1] > limit:
        raise HTTPError(too_large(limit, framing[1]), 413)
    if (body := take_whole(reader, framing)) is not None:
        return body  # whole already: no deadline to set
    try:
        async with asyncio.timeout(timeout):
            if framing[0] == "length":
                return await reader.readexactly(framing[1]) if framing[1] else b""
            return await read_body(reader, framing, limit, request=True)
    except TimeoutError:
        raise HTTPError(f"The request body did not arrive within {timeout:g} s ({flag}); the connection is "
                        "closed.", 408) from None


async def linger(reader: asyncio.StreamReader) -> None:
    """Read and drop what a client still sends of a body we refused, so that it can finish sending and read our
    answer (closing on unread bytes resets the connection, and the client may never see the answer). Bounded by
    LINGER_S, and ended by a pause of LINGER_IDLE_S or the client's close."""
    loop = asyncio.get_running_loop()
    end = loop.time() + LINGER_S
    try:
        while (left := end - loop.time()) > 0:
            async with asyncio.timeout(min(left, LINGER_IDLE_S)):
                if not await reader.read(1 << 20):
                    return
    except (TimeoutError, ConnectionError):
        return


class Server:
    """Serve handler(reader, writer, head) -> keep on host:port.

    header_timeout: the first head must arrive within it of the connection opening, a later one within it of its
    first byte (after up to idle_s of keep-alive); past it the client gets a 408 and the connection closes. A
    handler that raises HTTPError before answering gets that status, in OpenAI's error shape, and the connection
    closes."""

    def __init__(self, handler, header_timeout: float, idle_s: float, error_headers=()):
        for name, v in (("header_timeout", header_timeout), ("idle_s", idle_s)):
            if not 0 < v <= 3600:
                raise ValueError(f"{name} must be in (0, 3600] seconds, got {v}")
        self.handler, self.header_timeout, self.idle_s = handler, header_timeout, idle_s
        self.error_headers = list(error_headers)
        self.port = 0
        self._server = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound. OSError as the socket raised it."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self._on_client), host, port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proto: Connection = writer.transport.get_protocol()
        proto.task = asyncio.current_task()
        self._tasks.add(proto.task)
        try:
            for n in range(MAX_REQUESTS):
                try:
                    head = await self._next_head(reader, proto, first=n == 0)
                except HTTPError as e:
                    await send_json(writer, e.status, error_body(e.status, str(e)), False, self.error_headers)
                    break
                if head is None or proto.gone:
                    break
                proto.busy = True
                keep = await self.handler(reader, writer, head)
                proto.busy = False
                if not keep or proto.gone:
                    break
        except (asyncio.CancelledError, TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the client left or idled out (or we are stopping): nothing to answer
        finally:
            proto.busy = False
            proto.on_data = None
            self._tasks.discard(proto.task)
            writer.close()

    async def _next_head(self, reader, proto: Connection, first: bool):
        """The next request head; HTTPError 408 past the header deadline, TimeoutError (closed quietly) past
        idle_s with no byte of one."""
        loop = asyncio.get_running_loop()
        pending = first or bool(buffered(reader))  # a pipelined head has begun already
        try:
            async with asyncio.timeout(self.header_timeout if pending else self.idle_s) as deadline:
                if not pending:
                    def began():
                        nonlocal pending
                        pending = True
                        deadline.reschedule(loop.time() + self.header_timeout)
                    proto.on_data = began
                try:
                    return await read_head(reader, True)
                finally:
                    proto.on_data = None
        except TimeoutError:
            if not pending:
                raise
            raise HTTPError(f"The request head did not arrive within {self.header_timeout:g} s (header timeout); "
                            "the connection is closed.", 408) from None
