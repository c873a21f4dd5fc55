"""Just enough HTTP/1.1 for a reverse proxy: heads, bodies by Content-Length / chunked / close, one upstream pool;
with pump.py (a body relayed from the transport's reads), the one relay design of the gateway
(chaos/reference/gateway) and the LLM fault proxy (chaos/proxy/llm). pool.py holds the client side (an upstream
and its kept-alive connections).

Written on asyncio streams rather than aiohttp because the relay must add well under a millisecond to a stream's
first token: no per-chunk parsing, no header objects beyond a list of pairs, a body relayed as the bytes arrive.
aiohttp's client cost the gateway ~0.3 ms of CPU per request (BENCHMARKS section 5): with 50 streams starting
together, the last of them waited for the 49 before it.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from ..errors import ServiceError

HEAD_LIMIT = 64 * 1024  # request or response head; past it 431/502
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")  # 16 hex digits: up to 2**64 - 1; more is an overflow
_DIGITS = re.compile(r"[0-9]{1,18}")  # a Content-Length: ASCII digits only (str.isdigit takes '²' too)
PIECE = 256 * 1024
UPSTREAM_BUFFER = 1024 * 1024  # the upstream reader's buffer: big bodies flow in large reads
# RFC 9110 §7.6.1: meaningful for one connection only, never forwarded (plus whatever Connection lists).
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade"})


class HTTPError(ServiceError):
    """A malformed message: status is what to answer the client with (when it was the client's)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Head:
    """A parsed request or response head. headers: (name, value) pairs in order, names as sent."""

    first: tuple[str, str, str]  # (method, target, version) or (version, status, reason)
    headers: list[tuple[str, str]]

    def get(self, name: str, default: str | None = None) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def tokens(self, name: str) -> set[str]:
        """Comma-separated tokens of every header of that name, lower-cased (Connection, Transfer-Encoding)."""
        name = name.lower()
        return {t.strip().lower() for k, v in self.headers if k.lower() == name for t in v.split(",") if t.strip()}

    def keeps_alive(self, request: bool, framing: tuple[str, int] | None = None) -> bool:
        """May the connection carry another message after this one (RFC 9112 §9.3): HTTP/1.1 without
        Connection: close, and for a response (framing given) a body not delimited by the close."""
        version = self.first[2] if request else self.first[0]
        return version == "HTTP/1.1" and "close" not in self.tokens("connection") and \
            (framing is None or framing[0] != "close")

    def origin_target(self) -> str:
        """The request target in origin form (path and query): an absolute-form target ("http://host/p?q", as a
        client configured for a forward proxy sends) loses its scheme and authority."""
        target = self.first[1]
        if target.startswith(("http://", "https://")):
            return "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        return target

    def end_to_end(self, drop: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        """The headers a proxy forwards: hop-by-hop ones and those Connection names removed, and drop."""
        skip = HOP_BY_HOP | self.tokens("connection") | {d.lower() for d in drop}
        return [(k, v) for k, v in self.headers if k.lower() not in skip]


def parse_head(raw: bytes, request: bool) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes anything; kept for clarity of intent
        raise HTTPError("head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or (request and len(parts) != 3):
        raise HTTPError(f"bad {'request' if request else 'status'} line {lines[0][:80]!r}", 400 if request else 502)
    if request:
        if not parts[2].startswith("HTTP/1."):
            raise HTTPError(f"unsupported protocol {parts[2][:20]!r}: this proxy speaks HTTP/1.0 and 1.1", 505)
        first = (parts[0], parts[1], parts[2])
    else:
        if not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HTTPError(f"bad status line {lines[0][:80]!r}", 502)
        first = (parts[0], parts[1], parts[2] if len(parts) > 2 else "")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HTTPError(f"bad header line {line[:80]!r}", 400 if request else 502)
        headers.append((name, value.strip()))
    return Head(first, headers)


async def read_head(reader: asyncio.StreamReader, request: bool) -> Head | None:
    """The next head, or None at a clean EOF before any byte of it."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise HTTPError("connection closed inside a message head", 400 if request else 502) from None
    except asyncio.LimitOverrunError:
        raise HTTPError(f"message head over {HEAD_LIMIT} bytes", 431 if request else 502) from None
    return parse_head(raw[:-4].lstrip(b"\r\n"), request)


def body_framing(head: Head, request: bool, method: str = "GET") -> tuple[str, int]:
    """('length', n), ('chunked', 0), ('close', 0) or ('none', 0), per RFC 9112 §6.3."""
    if not request:
        status = int(head.first[1])
        if method == "HEAD" or status < 200 or status in (204, 304):
            return "none", 0
    te = head.tokens("transfer-encoding")
    if te:
        if "chunked" not in te:
            raise HTTPError(f"transfer-encoding {sorted(te)} without chunked", 400 if request else 502)
        if request and head.get("content-length") is not None:
            # RFC 9112 §6.1: a server MAY reject it, and it is how requests are smuggled past a proxy whose
            # upstream reads the other header. Rejected, as aiohttp (the reference server, the gateway) does.
            raise HTTPError("a request with both transfer-encoding and content-length", 400)
        return "chunked", 0
    cl = head.get("content-length")
    if cl is not None:
        if not _DIGITS.fullmatch(cl.strip()):
            raise HTTPError(f"bad content-length {cl[:20]!r}", 400 if request else 502)
        return "length", int(cl)
    return ("none", 0) if request else ("close", 0)


# asyncio's StreamReader has no public peek or unread: every use of its buffer is one of these four.
def buffered(r: asyncio.StreamReader) -> bytearray:
    """What r holds unread (its own buffer: look, do not change)."""
    return r._buffer  # noqa: SLF001


def take_buffered(r: asyncio.StreamReader) -> bytes:
    """All that r holds unread, taken out of it (and its transport read again if a full buffer had paused it)."""
    data = bytes(r._buffer)  # noqa: SLF001
    r._buffer.clear()  # noqa: SLF001
    r._maybe_resume_transport()  # noqa: SLF001
    return data


def take_whole(r: asyncio.StreamReader, framing: tuple[str, int]) -> bytes | None:
    """A Content-Length body already whole in r's buffer (it came with the head), taken out of it; None, and
    nothing taken, when the framing is another or the body is not all there yet."""
    kind, n = framing
    if kind != "length" or n > len(r._buffer):  # noqa: SLF001
        return None
    data = bytes(r._buffer[:n])  # noqa: SLF001
    del r._buffer[:n]  # noqa: SLF001
    r._maybe_resume_transport()  # noqa: SLF001
    return data


def unread(r: asyncio.StreamReader, data: bytes) -> None:
    """Put data back in front of what r holds, for its next read."""
    r._buffer[0:0] = data  # noqa: SLF001


def chunk_size(line: bytes, bad: int) -> int:
    """The size a chunk-size line gives (extensions dropped); HTTPError(bad) when it is not hex or overflows."""
    digits = line.split(b";", 1)[0].strip()
    if not _CHUNK_SIZE.fullmatch(digits):
        what = "overflows" if re.fullmatch(rb"[0-9A-Fa-f]+", digits) else "is not hex"
        raise HTTPError(f"chunk size {what}: {line[:40]!r}", bad)
    return int(digits, 16)


async def iter_body(reader: asyncio.StreamReader, framing: tuple[str, int], request: bool = False,
                    limit: int | None = None):
    """The payload bytes as they arrive (chunked framing removed: what one read brings is decoded at once, by the
    Dechunker). Raises IncompleteReadError on a short body, HTTPError on bad chunked framing (400 for a request's
    body, 502 for a response's) and, with limit, 413 as soon as a chunk's size says the body would pass it (before
    that chunk is read)."""
    kind, n = framing
    if kind == "length":
        while n > 0:
            piece = await reader.read(min(n, PIECE))
            if not piece:
                raise asyncio.IncompleteReadError(b"", n)
            n -= len(piece)
            yield piece
    elif kind == "chunked":
        dechunk, total = Dechunker(400 if request else 502), 0
        while not dechunk.done:
            data = await reader.read(PIECE)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            pieces = dechunk.feed(data)
            total += sum(map(len, pieces))
            if limit is not None and total + dechunk.left > limit:  # left: what the chunk being read still owes
                raise HTTPError(too_large(limit), 413)
            if pieces:
                yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if dechunk.rest:  # the next request (pipelined) or whatever follows: left for the next reader
            unread(reader, dechunk.rest)
    elif kind == "close":
        while piece := await reader.read(PIECE):
            yield piece


def too_large(limit: int, size: int | None = None) -> str:
    got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return f"The request body is too large ({got}); the limit is {limit} bytes."


async def read_body(reader: asyncio.StreamReader, framing: tuple[str, int], limit: int,
                    request: bool = False) -> bytes:
    parts, total = [], 0
    async for piece in iter_body(reader, framing, request, limit):
        total += len(piece)
        if total > limit:
            raise HTTPError(too_large(limit), 413)
        parts.append(piece)
    return b"".join(parts)


class Dechunker:
    """The chunked transfer coding (RFC 9112 §7.1) taken off bytes fed in pieces of any size: what a relay reads
    at once is decoded at once, with no await per chunk (awaiting a read per size line and per chunk cost the
    gateway more than the send). done: the last chunk and the trailers have passed; rest: bytes after them; bad:
    the status of an HTTPError for bad framing (400 for a request's body, 502 for an upstream's answer)."""

    __slots__ = ("bad", "buf", "done", "left", "state")
    LINE_LIMIT = 16 * 1024

    def __init__(self, bad: int = 502):
        self.buf, self.state, self.left, self.done, self.bad = b"", "size", 0, False, bad

    def feed(self, data: bytes) -> list[bytes]:
        buf = self.buf + data if self.buf else data
        out, pos = [], 0
        while not self.done:
            if self.state == "data":
                if self.left:
                    take = min(len(buf) - pos, self.left)
                    if take <= 0:
                        break
                    out.append(buf[pos:pos + take])
                    pos += take
                    self.left -= take
                    continue
                if len(buf) - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise HTTPError("chunk data not followed by CRLF", self.bad)
                pos += 2
                self.state = "size"
                continue
            i = buf.find(b"\r\n", pos)
            if i < 0:
                if len(buf) - pos > self.LINE_LIMIT:
                    raise HTTPError("a chunk size or trailer line over 16 KB", self.bad)
                break
            line, pos = buf[pos:i], i + 2
            if self.state == "trailers":
                self.done = not line  # trailers: dropped (hop-by-hop in practice)
                continue
            self.left = chunk_size(line, self.bad)
            self.state = "data" if self.left else "trailers"
        self.buf = buf[pos:]
        return out

    @property
    def rest(self) -> bytes:
        return self.buf if self.done else b""


def encode_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
