"""The client side of a reverse proxy: where requests go (Upstream) and the kept-alive connections to it (Pool)."""

from __future__ import annotations

import asyncio
import collections
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import ServiceError
from .wire import UPSTREAM_BUFFER, body_framing, buffered, encode_head, read_body, read_head


@dataclass(slots=True)
class Upstream:
    """Where requests go: scheme, host, port, base path (kept as a prefix) and the Host header to send."""

    url: str
    scheme: str = field(init=False)
    host: str = field(init=False)
    port: int = field(init=False)
    base: str = field(init=False)
    host_header: str = field(init=False)

    def __post_init__(self):
        u = urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"upstream {self.url!r}: give an http:// or https:// URL such as http://127.0.0.1:8000")
        if u.query or u.fragment:
            raise ValueError(f"upstream {self.url!r}: no query or fragment; a base path such as /api/v3 is fine")
        self.scheme, self.host = u.scheme, u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base = u.path.rstrip("/")
        default = self.port == (443 if u.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default else f"{host}:{self.port}"


class Pool:
    """Kept-alive connections to the one upstream. A connection goes back only after a complete response that
    did not say close; anything cut short is closed, never reused."""

    def __init__(self, upstream: Upstream, max_idle: int = 256):
        self.upstream = upstream
        self.max_idle = max_idle
        self.idle: collections.deque = collections.deque()
        self.opened = 0  # connections ever opened: what a test of reuse looks at
        self._ssl = ssl.create_default_context() if upstream.scheme == "https" else None

    async def get(self, fresh: bool = False) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        """(reader, writer, reused). fresh: a new connection whatever is idle (a retry after a pooled connection
        died unanswered: the others idle as long may be as dead, and the retry is the last try)."""
        while self.idle and not fresh:
            r, w = self.idle.pop()
            # A connection the upstream closed (or wrote to unasked) while idle is no use.
            if w.is_closing() or r.at_eof() or buffered(r):
                w.close()
                continue
            return r, w, True
        u = self.upstream
        r, w = await asyncio.open_connection(u.host, u.port, ssl=self._ssl, limit=UPSTREAM_BUFFER,
                                             server_hostname=u.host if self._ssl else None)
        self.opened += 1
        return r, w, False

    async def send(self, message: bytes):
        """((reader, writer), response head) for a whole request sent on a pooled connection; a kept-alive
        connection the upstream had closed meanwhile (it said nothing) is replaced by a fresh one, once. The caller
        reads the body and then puts the connection back (put) or closes it."""
        for again in (True, False):
            r, w, reused = await self.get(fresh=not again)
            try:
                w.write(message)
                await w.drain()
                resp = await read_head(r, False)
                while resp is not None and resp.first[1].startswith("1"):
                    resp = await read_head(r, False)  # 100 Continue and friends: ours to swallow
                if resp is None:
                    raise ConnectionResetError("the upstream closed the connection without answering")
                return (r, w), resp
            except BaseException as e:
                w.close()
                if not (again and reused and isinstance(e, (OSError, asyncio.IncompleteReadError))):
                    raise
        raise AssertionError("not reached")

    async def fetch(self, method: str, path: str, limit: int = 1 << 20) -> tuple[int, bytes]:
        """(status, body) of a request with no body (GET /health, GET /v1/models). Raises OSError,
        IncompleteReadError or HTTPError; a caller's timeout that cancels it leaves no connection behind."""
        u = self.upstream
        conn, resp = await self.send(encode_head(f"{method} {u.base}{path} HTTP/1.1", [("Host", u.host_header)]))
        ok = False
        try:
            framing = body_framing(resp, False, method)
            body = await read_body(conn[0], framing, limit)
            ok = resp.keeps_alive(False, framing)
            return int(resp.first[1]), body
        finally:
            if ok:
                self.put(*conn)
            else:
                conn[1].close()

    def put(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if len(self.idle) >= self.max_idle or w.is_closing():
            w.close()
            return
        self.idle.append((r, w))

    def close(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()


class UpstreamError(ServiceError):
    """The upstream failed (refused, reset, a malformed answer): a 502 if nothing went to the client yet."""
