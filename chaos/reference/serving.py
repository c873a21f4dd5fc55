"""What a replica and the gateway share as processes: listening with a clear error and read deadlines, draining on
signals.

aiohttp has no header-read timeout, and a fresh connection that never completes its headers is never closed (its
keep-alive timer only starts after a first request). So each connection's protocol is wrapped in a _Guard that
holds two deadlines: the headers of a request must arrive within header_timeout of its first byte (or of the
connection opening), and its body within body_timeout of its handler starting. Past either, the client gets a 408
in OpenAI's error shape and the connection is closed; its handler, if any, is cancelled.

aiohttp answers what its HTTP parser rejects (a request line or header over 8190 bytes, over 128 headers, bad
chunked framing, Content-Length with Transfer-Encoding, ...) itself, before any middleware runs, in text/plain;
and so an exception that escapes a handler. It has no public hook for that answer: the one place is
RequestHandler.handle_error, which _JsonErrorHandler overrides to give the same status in OpenAI's JSON shape.
Should a later aiohttp stop calling it, aiohttp's own text/plain answer comes back (nothing else changes);
tests/reference/test_protocol_abuse.py fails loudly if that happens.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import socket
import struct
import sys

from aiohttp import http_exceptions, web

from ..common import error_type_for, openai_error
from ..errors import ServiceError, SetupError
from ..http1.wire import too_large


class ListenError(SetupError, RuntimeError):
    pass


def _timeout_response(what: str, seconds: float, flag: str) -> bytes:
    body = json.dumps(openai_error(f"The request {what} did not arrive within {seconds:g} s ({flag}); the connection "
                                   f"is closed.", "invalid_request_error", "request_timeout")).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _json_error(resp: web.StreamResponse, exc: BaseException | None) -> web.StreamResponse:
    """aiohttp's own error answer (resp) as the same status in OpenAI's JSON shape; the connection still closes."""
    status = resp.status
    if status >= 500:  # the exception is in aiohttp's log; no detail (a traceback in debug mode) goes out
        message, code = "internal error: the server failed on this request", "internal_error"
        if status == 504:
            message, code = "the request handler timed out", "timeout"
    else:
        # aiohttp's words, first line only (the rest draws a caret under the bytes it quoted)
        detail = ((getattr(resp, "text", None) or "").strip().splitlines() or ["malformed request"])[0]
        detail = detail.strip().rstrip(":.")[:300]
        if isinstance(exc, http_exceptions.LineTooLong):
            message, code = f"The request line or a header field is too long: {detail}", "request_head_too_large"
        else:
            message, code = f"The request is not valid HTTP/1.1: {detail}", "invalid_http_request"
        message += ". The connection is closed."
    out = web.json_response(openai_error(message, error_type_for(status), code), status=status)
    out.force_close()
    return out


class _JsonErrorHandler(web.RequestHandler):
    """aiohttp's RequestHandler, its own error answers in OpenAI's JSON shape (see the module's docstring)."""

    __slots__ = ()

    def handle_error(self, request, *args, **kwargs):
        # aiohttp's own first: it logs, and refuses (ConnectionError) when a response has begun already.
        resp = super().handle_error(request, *args, **kwargs)
        exc = next((a for a in (*args, *kwargs.values()) if isinstance(a, BaseException)), None)
        try:
            return _json_error(resp, exc)
        except Exception:  # never worse than aiohttp's own answer
            return resp


def _json_errors(handler):
    """The handler aiohttp's Server made, now a _JsonErrorHandler: same object, same slots, one method more. Left
    as it is when aiohttp makes something other than a plain RequestHandler (nothing to narrow it to)."""
    if type(handler) is web.RequestHandler:
        try:
            handler.__class__ = _JsonErrorHandler
        except TypeError:  # a layout that no longer allows it: aiohttp's text/plain answers, nothing else lost
            pass
    return handler


class _Guard(asyncio.Protocol):
    """Passes every transport event to aiohttp's RequestHandler, and holds the connection's read deadline."""

    __slots__ = ("handler", "limits", "guards", "transport", "timer", "state", "request", "responded")

    IDLE, HEADERS, BODY, ACTIVE, LINGER = range(5)

    def __init__(self, handler, limits: tuple[float, float], guards: dict):
        self.handler, self.limits, self.guards = handler, limits, guards
        self.transport = self.timer = self.request = None
        self.state, self.responded = self.HEADERS, False

    # -- transport events ------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.guards[transport] = self
        self._arm(self.limits[0], "headers")
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.state == self.LINGER and self.request.content.is_eof():
            self.state, self.request = self.IDLE, None  # the unread body is over: this is a new request
        if self.state == self.IDLE:  # the first byte of the next request on a kept-alive connection
            # Reset here, not in request_finished: aiohttp prepares a returned response after the middleware
            # has finished, so the previous response marks the connection only after request_finished ran.
            self.state, self.responded = self.HEADERS, False
            self._arm(self.limits[0], "headers")
        self.handler.data_received(data)

    def eof_received(self):
        return self.handler.eof_received()

    def connection_lost(self, exc) -> None:
        self._disarm()
        self.guards.pop(self.transport, None)
        self.request = None
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    # -- what the middleware tells it ------------------------------------------------------------------
    def request_started(self, request: web.BaseRequest) -> None:
        self.request, self.responded = request, False
        if request.content.is_eof():
            self.state = self.ACTIVE
            self._disarm()
        else:
            self.state = self.BODY
            self._arm(self.limits[1], "body")

    def body_done(self) -> None:
        if self.state == self.BODY:
            self.state = self.ACTIVE
            self._disarm()

    def request_finished(self) -> None:
        self._disarm()
        # A body left unread (a 413 answered from Content-Length) is drained by aiohttp's lingering close,
        # bounded by its own timer; a header deadline must not answer those bytes with a 408.
        if self.request is not None and not self.request.content.is_eof():
            self.state = self.LINGER
        else:
            self.state, self.request = self.IDLE, None

    # -- the deadline ------------------------------------------------------------------------------------
    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self.timer = asyncio.get_running_loop().call_later(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self, what: str, seconds: float) -> None:
        self.timer = None
        if self.transport is None or self.transport.is_closing():
            return
        if what == "body" and self.request is not None and self.request.content.is_eof():
            self.body_done()  # it did all arrive; the handler just had not read it yet
            return
        if not self.responded:  # a 408 only where no response has begun on this connection
            self.transport.write(_timeout_response(what, seconds, f"--{what.rstrip('s')}-timeout"))
        self.transport.close()


def _guard_middleware(guards: dict):
    @web.middleware
    async def guard(request: web.Request, handler):
        g = guards.get(request.transport)
        if g is None:
            return await handler(request)
        g.request_started(request)
        try:
            return await handler(request)
        finally:
            g.request_finished()

    return guard


def _on_prepare(guards: dict):
    async def prepared(request: web.Request, response: web.StreamResponse) -> None:
        g = guards.get(request.transport)
        if g is not None:
            g.responded = True
            g.body_done()  # a handler that answers has stopped waiting for its body

    return prepared


class _GuardedSite(web.BaseSite):
    """A TCP site whose connections are _Guard-wrapped (aiohttp's low-level Server is the protocol factory)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, limits: tuple[float, float], guards: dict):
        super().__init__(runner)
        self._host, self._port, self._limits, self._guards = host, port, limits, guards

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server

        def factory():
            return _Guard(_json_errors(server()), self._limits, self._guards)

        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, family=socket.AF_UNSPEC, reuse_address=True, backlog=1024)


async def listen(app: web.Application, host: str, port: int, *, header_timeout: float = 10.0,
                 body_timeout: float = 30.0, keepalive_timeout: float = 75.0) -> tuple[web.AppRunner, int]:
    """Serve app on host:port (0 picks a free port); (runner, bound port). A client that leaves cancels its
    handler, which is how an abandoned request is aborted upstream and in the engine.

    header_timeout: a request's headers must arrive within it (from its first byte, or from the connection
    opening); body_timeout: its body within it from its handler starting; keepalive_timeout: an idle kept-alive
    connection is closed after it. Past the first two the client gets a 408 and the connection is closed."""
    for name, v in (("header_timeout", header_timeout), ("body_timeout", body_timeout),
                    ("keepalive_timeout", keepalive_timeout)):
        if not 0 < v <= 3600:
            raise ValueError(f"{name} must be in (0, 3600] seconds, got {v}")
    guards: dict = {}
    app.middlewares.insert(0, _guard_middleware(guards))  # outermost: it sees every request first
    app.on_response_prepare.append(_on_prepare(guards))
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0,
                           keepalive_timeout=keepalive_timeout)
    await runner.setup()
    site = _GuardedSite(runner, host, port, (header_timeout, body_timeout), guards)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise listen_error(host, port, e) from None
    return runner, runner.addresses[0][1]


def listen_error(host: str, port: int, e: OSError) -> ListenError:
    return ListenError(f"cannot listen on {host}:{port}: {e.strerror or e}. Is another server using the port? "
                       f"Choose another with --port (0 picks a free one).")


def json_content_type_error(content_type: str) -> str | None:
    """Why a body of this Content-Type is not taken as JSON; None for application/json (any parameters)."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return f"Content-Type must be application/json, not {content_type[:60] or 'missing'!r}"
    return None


def route_error(request: web.BaseRequest, e: web.HTTPException) -> tuple[str, str]:
    """(message, code) for aiohttp's own answer to a route (404, 405, ...), in words a client can act on."""
    message = {404: f"no route for {request.method} {request.path}",
               405: f"{request.method} is not allowed on {request.path}"}.get(e.status, e.reason)
    return message, e.reason.lower().replace(" ", "_")


def route_headers(e: web.HTTPException) -> dict:
    """What aiohttp's own answer carried that a client needs: a 405's Allow (RFC 9110 requires it)."""
    allow = e.headers.get("Allow")
    return {"Allow": allow} if allow else {}


class BodyTooLarge(ServiceError):
    """A request body over its limit: size from Content-Length, None when a chunked body ran past it."""

    def __init__(self, size: int | None, limit: int):
        super().__init__(too_large(limit, size))
        self.size, self.limit = size, limit


async def read_bounded(request: web.Request, limit: int) -> bytes:
    """The body, refused from its Content-Length before any of it is read; a chunked body is read only up to
    the limit. Read in the stream's own small pieces and joined once: request.read() lifts the buffer limit to
    the body limit and copies the body twice, holding the event loop for tens of ms a body."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(request.content_length, limit)
    chunks, size = [], 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(None, limit)
        chunks.append(chunk)
    return b"".join(chunks)


class WorkerError(ServiceError, RuntimeError):
    """The body worker died or overran its time on one call; the next call starts a fresh one."""


class WorkerBusy(ServiceError, RuntimeError):
    """max_waiting calls already wait for the body worker: this one is refused rather than queued."""


class BodyWorker:
    """Runs target(body, meta) -> a JSON-able result in a child process, one call at a time.

    Why a process and not a thread: json.loads holds the GIL for its whole call, ~1 s for a 20 MB array of
    numbers, so a worker thread would still stall the event loop (and /health) that long; and a hostile body's
    millions of objects then never exist in the serving process, whose memory stays flat. Only the result comes
    back. target is "module:function", importable without torch; the child exits when its stdin closes (so also
    when this process dies).

    At most max_waiting calls wait behind the one running (each holds its body, up to the body limit); one more
    raises WorkerBusy at once."""

    def __init__(self, target: str, timeout: float = 30.0, max_waiting: int = 4):
        self.target, self.timeout, self.max_waiting = target, timeout, max_waiting
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.waiting = 0

    @property
    def busy(self) -> bool:
        """A call now would be refused: a caller can say so before it reads a body."""
        return self._lock.locked() and self.waiting >= self.max_waiting

    async def call(self, body: bytes, meta: dict):
        if self.busy:
            raise WorkerBusy(f"{self.waiting} requests already wait for the body worker")
        self.waiting += 1
        try:
            await self._lock.acquire()  # not shielded: a client that leaves while it waits costs no parse
        finally:
            self.waiting -= 1
        # Shielded from here: a handler cancelled mid-call (its client left) must not leave a reply unread in
        # the pipe. The lock is released when the exchange ends, whoever awaits it.
        task = asyncio.ensure_future(self._exchange(body, meta))
        task.add_done_callback(self._exchanged)
        return await asyncio.shield(task)

    def _exchanged(self, task: asyncio.Task) -> None:
        self._lock.release()
        task.cancelled() or task.exception()  # retrieved even when nobody awaits it

    async def _exchange(self, body: bytes, meta: dict):
        head = json.dumps(meta).encode()
        for attempt in (1, 2):  # a worker that died earlier (killed, out of memory) gets one fresh successor
            proc = await self._running()
            try:
                proc.stdin.write(struct.pack("!II", len(head), len(body)) + head)
                proc.stdin.write(body)
                await proc.stdin.drain()
                async with asyncio.timeout(self.timeout):
                    (n,) = struct.unpack("!I", await proc.stdout.readexactly(4))
                    reply = await proc.stdout.readexactly(n)
                break
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                self.close()
                if attempt == 2:  # twice in a row: this body is what kills it
                    raise WorkerError(f"the body worker died on this request ({type(e).__name__})") from None
            except TimeoutError:
                self.close()
                raise WorkerError(f"the body worker took over {self.timeout:g}s on this request") from None
        out = json.loads(reply)
        if "crash" in out:
            raise WorkerError(f"the body worker raised on this request: {out['crash']}")
        return out["result"]

    async def _running(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", f"from chaos.reference.serving import worker_main; worker_main({self.target!r})",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
        return self._proc

    def close(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
        self._proc = None


def worker_main(target: str) -> None:
    """The child side of BodyWorker: frames of (meta, body) in on stdin, (result) out on stdout."""
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while len(head := inp.read(8)) == 8:
        n_meta, n_body = struct.unpack("!II", head)
        meta = json.loads(inp.read(n_meta))
        body = inp.read(n_body)
        try:
            reply = {"result": fn(body, meta)}
        except Exception as e:  # reported for this call; the worker serves on
            reply = {"crash": repr(e)[:500]}
        del body
        data = json.dumps(reply).encode()
        out.write(struct.pack("!I", len(data)) + data)
        out.flush()


async def drain_on_signal(service, drain_timeout: float) -> int:
    """Wait for SIGTERM or SIGINT, then set service.draining (new work is refused with 503) and let in-flight
    requests finish, up to drain_timeout or a second signal. Returns how many were still in flight.

    service has: draining (bool), in_flight (int), idle (asyncio.Event set when nothing is in flight)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    seen: list[int] = []

    def on_signal():
        seen.append(1)
        service.draining = True
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stop.wait()
    deadline = loop.time() + drain_timeout
    while service.in_flight and len(seen) < 2 and loop.time() < deadline:
        try:
            await asyncio.wait_for(service.idle.wait(), 0.1)
        except TimeoutError:
            pass
    return service.in_flight
