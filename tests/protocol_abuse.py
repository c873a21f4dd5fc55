"""Raw HTTP/1.1 protocol abuse over loopback, shared by the reference server's, the gateway's and the LLM fault
proxy's test_protocol_abuse.py: the malformed requests (exact bytes, no client library in between), reading one
answer off a socket, the OpenAI error shape every error body must have, and 1,000 idle connections at once.

Each server's module says what it expects of each case (status, and whether the connection must close): the
servers differ where the proxy relays to its upstream what aiohttp would refuse itself (a head up to 64 KB)."""

from __future__ import annotations

import json
import resource
import selectors
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pytest

KB = 1024


@dataclass(frozen=True)
class Case:
    """parts are sent in order, with a pause between them (so a head is handled before its body arrives);
    after the last, the client half-closes (shut) or just waits for the answer."""

    name: str
    parts: tuple[bytes, ...]
    shut: bool = False


@dataclass
class Answer:
    status: int | None  # None: the server closed (or reset) without answering
    headers: dict = field(default_factory=dict)  # lower-cased names
    body: bytes = b""
    closed: bool = False  # the server closed the connection after the answer
    raw: bytes = b""

# What the reference server answers (it listens through chaos/reference/serving.py, aiohttp's parser): (status,
# the connection closes after it); None: closed without an answer.
AIOHTTP_EXPECT = {
    "request line over 8 KB (long URL)": (400, True),
    "request line over 64 KB (long URL)": (400, True),
    "one header over 8 KB": (400, True),
    "one header over 64 KB": (400, True),
    "100 headers, 10 KB in all": (200, False),  # aiohttp limits each line and the count, not the total
    "200 headers, 4 KB in all": (400, True),  # over aiohttp's 128
    "700 headers, 70 KB in all": (400, True),
    "chunk size not hex": (400, True),
    "chunk size overflows 64 bits": (400, True),
    "chunk size of 256 TB": (408, True),  # valid framing; the rest never comes: --body-timeout
    "no CRLF after a chunk": (400, True),
    "chunked with Content-Length too": (400, True),
    # aiohttp's C parser does not pass a framing error found after the head to the request's payload (the
    # handler would wait on it for ever): --body-timeout ends it.
    "chunk size not hex, after the head": (408, True),
    "chunk size overflows, after the head": (408, True),
    "no CRLF after a chunk, after the head": (408, True),
    "Content-Length over what is sent, client waits": (408, True),
    "Content-Length over what is sent, client half-closes": (None, True),
}

# What chaos/http1/server.py answers itself (the gateway; the LLM fault proxy where it does not relay): a head
# up to 64 KB in all is valid, past it 431; bad body framing is refused at once, a huge chunk from its size line.
H1_EXPECT = {
    "request line over 8 KB (long URL)": (200, False),  # GET /health
    "request line over 64 KB (long URL)": (431, True),
    "one header over 8 KB": (200, False),
    "one header over 64 KB": (431, True),
    "100 headers, 10 KB in all": (200, False),
    "200 headers, 4 KB in all": (200, False),
    "700 headers, 70 KB in all": (431, True),
    "chunk size not hex": (400, True),
    "chunk size overflows 64 bits": (400, True),
    "chunk size of 256 TB": (413, True),  # refused from the size line, before any of it is read
    "no CRLF after a chunk": (400, True),
    "chunked with Content-Length too": (400, True),
    "chunk size not hex, after the head": (400, True),
    "chunk size overflows, after the head": (400, True),
    "no CRLF after a chunk, after the head": (400, True),
    "Content-Length over what is sent, client waits": (408, True),
    "Content-Length over what is sent, client half-closes": (None, True),
}
H1_CODES = {400: ("invalid_http_request",), 408: ("request_timeout",), 413: ("request_too_large",),
            431: ("request_head_too_large",)}


def cases(path: str, body: bytes) -> list[Case]:
    """The abuse, against POST path with a valid JSON body (body) where one is needed."""
    post = (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    chunked = post + b"Transfer-Encoding: chunked\r\n\r\n"
    n = b"%x" % len(body)

    def get(target: bytes = b"/health", headers: bytes = b"") -> bytes:
        return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"

    def many(count: int, size: int) -> bytes:  # count headers of about size bytes each
        return b"".join(b"X-Pad-%04d: %s\r\n" % (i, b"v" * (size - 14)) for i in range(count))

    bad_size, overflow, no_crlf = (b"zz\r\n" + body + b"\r\n0\r\n\r\n",
                                   b"f" * 22 + b"\r\n" + body + b"\r\n0\r\n\r\n",
                                   n + b"\r\n" + body + b"XX0\r\n\r\n")
    return [
        Case("request line over 8 KB (long URL)", (get(b"/health?pad=" + b"a" * (9 * KB)),)),
        Case("request line over 64 KB (long URL)", (get(b"/health?pad=" + b"a" * (70 * KB)),)),
        Case("one header over 8 KB", (get(headers=b"X-Big: " + b"b" * (9 * KB) + b"\r\n"),)),
        Case("one header over 64 KB", (get(headers=b"X-Big: " + b"b" * (70 * KB) + b"\r\n"),)),
        Case("100 headers, 10 KB in all", (get(headers=many(100, 100)),)),
        Case("200 headers, 4 KB in all", (get(headers=many(200, 20)),)),
        Case("700 headers, 70 KB in all", (get(headers=many(700, 100)),)),
        Case("chunk size not hex", (chunked + bad_size,)),
        Case("chunk size overflows 64 bits", (chunked + overflow,)),
        Case("chunk size of 256 TB", (chunked + b"ffffffffffff\r\n" + body + b"\r\n0\r\n\r\n",)),
        Case("no CRLF after a chunk", (chunked + no_crlf,)),
        Case("chunked with Content-Length too",
             (post + b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(body) + n + b"\r\n" + body
              + b"\r\n0\r\n\r\n",)),
        Case("chunk size not hex, after the head", (chunked, bad_size)),
        Case("chunk size overflows, after the head", (chunked, overflow)),
        Case("no CRLF after a chunk, after the head", (chunked, no_crlf)),
        Case("Content-Length over what is sent, client waits",
             (post + b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body,)),
        Case("Content-Length over what is sent, client half-closes",
             (post + b"Content-Length: %d\r\n\r\n" % (len(body) + 100) + body,), shut=True),
    ]


def address(base_url: str) -> tuple[str, int]:
    u = urlparse(base_url)
    return u.hostname, u.port


def send(base_url: str, case: Case, limit_s: float = 30.0, see_close: bool = True) -> Answer:
    """Send the case's bytes and read the answer: one response, then (see_close) whether the server closed after
    it."""
    with socket.create_connection(address(base_url), timeout=limit_s) as s:
        for i, part in enumerate(case.parts):
            if i:
                time.sleep(0.3)  # the head is parsed and handled before the rest arrives
            try:
                s.sendall(part)
            except OSError:  # the server answered and closed before taking it all (a head over its limit)
                break
        if case.shut:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        return read_answer(s, limit_s, see_close)


def read_answer(s: socket.socket, limit_s: float = 30.0, see_close: bool = True) -> Answer:
    """One response off s (Content-Length, chunked or to the close), then (see_close) up to 5 s more to see the
    connection closed. The socket timeout bounds every read: a server that neither answers nor closes fails the
    caller's assertion."""
    s.settimeout(limit_s)
    buf = b""
    deadline = time.monotonic() + limit_s

    def more() -> bytes:
        nonlocal buf
        try:
            piece = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            piece = b""
        buf += piece
        return piece

    while b"\r\n\r\n" not in buf:
        if not more() or time.monotonic() > deadline:
            return Answer(None, closed=True, raw=buf)
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    buf = rest
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n and more():
            pass
        body, buf = buf[:n], buf[n:]
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        while not buf.endswith(b"0\r\n\r\n") and more():
            pass
        body, out = buf, b""
        while body:
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            out, body = out + body[:size], body[size + 2:]
        body, buf = out, b""
    else:
        while more():
            pass
        body, buf = buf, b""
    closed = False
    if see_close:
        s.settimeout(5)
        try:
            closed = s.recv(65536) == b""
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
    return Answer(status, headers, body, closed, head + b"\r\n\r\n" + body)


def assert_openai_error(a: Answer) -> dict:
    """The body is {"error": {"message": str, "type": str, "param": ..., "code": ...}}, served as JSON."""
    assert a.headers.get("content-type", "").split(";")[0].strip() == "application/json", a.raw[:300]
    body = json.loads(a.body)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["type"], str) and err["type"], body
    return err


def check(a: Answer, expect: tuple[int | None, bool]) -> None:
    """As expected (status, closes), never a 5xx, and every error OpenAI-shaped."""
    status, closes = expect
    assert a.status == status, f"expected {status}, got {a.status}: {a.raw[:300]!r}"
    if a.status is not None:
        assert a.status < 500, a.raw[:300]
        if a.status >= 400:
            assert_openai_error(a)
    if closes:
        assert a.closed, f"the connection stayed open after {a.status}"


# -- many idle connections ----------------------------------------------------------------------------------

def ensure_fds(n: int) -> None:
    """Let this process (and the servers it starts afterwards, which inherit the limit) hold n more sockets:
    raise the soft limit on open files, within the hard one; skip if even that is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"ulimit -n: the hard limit {hard} is below the {want} open files this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class IdleConnections:
    """n connections opened at once that never send a byte. collect() waits until the server has closed every
    one, and says what each got and when (seconds from its own connect)."""

    def __init__(self, base_url: str, n: int):
        self.socks, self.opened = [], []
        addr = address(base_url)
        try:
            for _ in range(n):
                s = socket.create_connection(addr, timeout=30)
                s.setblocking(False)
                self.socks.append(s)
                self.opened.append(time.monotonic())
        except BaseException:
            self.close()
            raise

    def collect(self, limit_s: float) -> list[tuple[bytes, float | None]]:
        """(what the server sent, seconds until it closed or None if it had not by limit_s) per connection."""
        got = [b""] * len(self.socks)
        closed: list[float | None] = [None] * len(self.socks)
        sel = selectors.DefaultSelector()
        for i, s in enumerate(self.socks):
            sel.register(s, selectors.EVENT_READ, i)
        left, deadline = len(self.socks), time.monotonic() + limit_s
        while left and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.5):
                i = key.data
                try:
                    piece = self.socks[i].recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    piece = b""
                if piece:
                    got[i] += piece
                    continue
                closed[i] = time.monotonic() - self.opened[i]
                sel.unregister(self.socks[i])
                left -= 1
        sel.close()
        return list(zip(got, closed))

    def close(self) -> None:
        for s in self.socks:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_idle_closed(results: list[tuple[bytes, float | None]], header_timeout: float) -> None:
    """Every idle connection was closed, none before the header timeout, each with a 408 in the OpenAI shape."""
    still_open = sum(t is None for _, t in results)
    assert not still_open, f"{still_open} of {len(results)} idle connections were never closed"
    early = [t for _, t in results if t < header_timeout - 0.1]
    assert not early, f"{len(early)} idle connections closed before the {header_timeout} s header timeout: {early[:5]}"
    for raw, _ in results:
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), raw[:200]
        ctype = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-type:")]
        assert ctype and ctype[0].split(b":", 1)[1].split(b";")[0].strip() == b"application/json", head
        err = json.loads(body)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["code"] == "request_timeout", err


def wait_kv_free(base_url: str, timeout: float = 20.0) -> None:
    """Once idle, a replica runs nothing and holds no KV block (generous: a busy box may still be finishing)."""
    from tests.reference.http_util import metric

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if metric(base_url, "vllm:num_requests_running") == 0 and metric(base_url, "vllm:kv_cache_usage_perc") == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"KV blocks held once idle: {metric(base_url, 'vllm:kv_cache_usage_perc')}")
