"""What the toxiproxy tests share: an upstream of our own (echo, keep-alive HTTP, SSE) on a loop in a thread,
raw-HTTP calls to the API, and a minimal keep-alive HTTP client on a plain socket (so each request's timing is
what the proxy adds, not a library's)."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time


class Upstream:
    """Echo on `echo_port`; HTTP/1.1 keep-alive on `http_port`:
    GET /small -> 'ok'; GET /bytes/N -> N bytes; GET /sse/N/GAP_MS -> N events GAP ms apart, then close;
    GET /close -> 'bye' and the server closes its side."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.echo = self._run(asyncio.start_server(self._echo, "127.0.0.1", 0))
        self.http = self._run(asyncio.start_server(self._http, "127.0.0.1", 0))
        self.echo_port = self.echo.sockets[0].getsockname()[1]
        self.http_port = self.http.sockets[0].getsockname()[1]

    def _run(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        for s in (self.echo, self.http):
            self.loop.call_soon_threadsafe(s.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _echo(self, r: asyncio.StreamReader, w: asyncio.StreamWriter):
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()

    async def _http(self, r: asyncio.StreamReader, w: asyncio.StreamWriter):
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                if path.startswith("/bytes/"):
                    n = int(path.split("/")[2])
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                    block = b"x" * 65536
                    for i in range(0, n, len(block)):
                        w.write(block[:min(len(block), n - i)])
                        await w.drain()
                elif path.startswith("/sse/"):
                    _, _, n, gap = path.split("/")
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                    for i in range(int(n)):
                        w.write(b"data: %d\n\n" % i)
                        await w.drain()
                        await asyncio.sleep(int(gap) / 1000)
                    break
                elif path == "/close":
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye")
                    await w.drain()
                    break
                else:
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            w.close()


def api(base_port: int, method: str, path: str, body=None, headers=None, raw: bytes | None = None):
    """One API call over http.client: (status, headers dict lowercased, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", base_port, timeout=10)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def addr(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    return ("127.0.0.1" if host in ("", "::", "0.0.0.0") else host), int(port)


class HttpConn:
    """A keep-alive HTTP/1.1 connection on a plain socket."""

    def __init__(self, port: int, timeout: float = 10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError("closed by the peer")
        self.buf += data

    def get(self, path: str = "/small") -> bytes:
        self.sock.sendall(b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path.encode())
        return self.read_response()

    def read_response(self) -> bytes:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return body

    def timed_get(self, path: str = "/small") -> float:
        t0 = time.perf_counter()
        self.get(path)
        return (time.perf_counter() - t0) * 1000

    def close(self):
        self.sock.close()


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]
