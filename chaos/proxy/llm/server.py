"""LLMProxy: each request from a client connection (chaos/http1/server.py listens, one task a connection, as
for the gateway) relayed to the upstream.

The no-fault path relays heads and body bytes as they come (chunk framing re-done, nothing else parsed); the
SSE stream is split into events only when a stream or content fault applies to the request."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import traceback

from chaos.common import FAULT_TOKEN_HEADER, openai_error
from chaos.http1.server import REASONS, Server, error_body, linger, quiet, read_whole, send_json
from chaos.http1.pool import Pool, Upstream, UpstreamError
from chaos.http1.wire import HTTPError, body_framing, encode_head, iter_body, read_head

from . import admin
from .base import Run
from .relay import relay_response
from .rules import Request, Rule

BUFFER_LIMIT = 4 * 1024 * 1024  # request bodies up to this are read whole (matching, retry on a stale connection)
IDLE_S = 300.0  # a kept-alive client connection with no request for this long is closed
HEADER_TIMEOUT_S = 10.0  # a request's head must arrive within this of its first byte (or of the connection opening)
BODY_TIMEOUT_S = 30.0  # and a body the proxy reads whole within this of its head; past either: 408 and close


class Exchange:
    """One client request on its way: what answers and fault effects need of it."""

    def __init__(self, proxy, writer, version: str, keep: bool, request: Request, runs: list[Run]):
        self.proxy, self.writer, self.version, self.keep = proxy, writer, version, keep
        self.request, self.runs = request, runs
        self.answered = False

    def fault_headers(self, altering: bool = False) -> list[tuple[str, str]]:
        """One header per rule that acted (altering: the answer is rewritten, so every stream/content rule too)."""
        return [("x-chaos-fault", r.tag) for r in self.runs
                if r.detail or (altering and r.effect.kind in ("stream", "content"))]

    def base_headers(self) -> list[tuple[str, str]]:
        h = self.fault_headers()
        if self.request.request_id:
            h.append(("x-request-id", self.request.request_id))
        if not self.keep:
            h.append(("Connection", "close"))
        return h

    async def respond(self, status: int, body: bytes, headers: list[tuple[str, str]],
                      content_type: str = "application/json") -> None:
        self.answered = True
        hs = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers, *self.base_headers()]
        self.writer.write(encode_head(f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", hs) + body)
        await self.writer.drain()

    def quiet(self) -> None:
        """We close the client connection ourselves now: that is not the client leaving."""
        self.keep = False
        quiet(self.writer)

    def drop(self) -> None:
        """Close the client's connection without a response."""
        self.answered = True
        self.quiet()
        self.writer.close()


class LLMProxy:
    """An HTTP/1.1 reverse proxy to one upstream, with fault rules driven by add_rule/remove_rule or /__chaos/."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 log_path: str | None = None, header_timeout: float = HEADER_TIMEOUT_S,
                 body_timeout: float = BODY_TIMEOUT_S):
        for name, v in (("header_timeout", header_timeout), ("body_timeout", body_timeout)):
            if not 0 < v <= 3600:
                raise ValueError(f"{name} must be in (0, 3600] seconds, got {v}")
        self.header_timeout, self.body_timeout = header_timeout, body_timeout
        self.upstream = Upstream(upstream)
        self.host, self.port = host, port
        self.token = token or None
        self.log_path = log_path
        self.pool = Pool(self.upstream)
        self._rules: dict[str, Rule] = {}
        self._http = Server(self._exchange, header_timeout, IDLE_S)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._log = None

    # -- lifecycle and rules -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        if self.log_path:
            self._log = open(self.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in stop()
        self.port = await self._http.start(self.host, self.port)

    async def stop(self) -> None:
        await self._http.close()
        self.pool.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def add_rule(self, spec: dict) -> Rule:
        """Store a rule (RuleError: a bad field; KeyError: the name exists)."""
        rule = Rule(spec)
        if rule.name in self._rules:
            raise KeyError(f"a rule named {rule.name!r} exists: DELETE /__chaos/faults/{rule.name} first")
        self._rules[rule.name] = rule
        return rule

    def remove_rule(self, name: str) -> None:
        """Stop the rule, also where it acts on requests in flight. KeyError if there is none of that name."""
        rule = self._rules.pop(name)
        self._call(rule.remove)

    def clear_rules(self) -> None:
        for name in list(self._rules):
            self.remove_rule(name)

    def rules(self) -> list[Rule]:
        return list(self._rules.values())

    def get_rule(self, name: str) -> Rule | None:
        return self._rules.get(name)

    def _call(self, fn) -> None:
        # rule.remove sets an asyncio.Event: from another thread (a test, an embedding app) it goes via the loop.
        if self._loop is not None and self._thread != threading.get_ident() and self._loop.is_running():
            self._loop.call_soon_threadsafe(fn)
        else:
            fn()

    def _log_runs(self, req: Request, runs: list[Run]) -> None:
        if self._log is None:
            return
        for r in runs:
            self._log.write(json.dumps({"t": round(time.time(), 6), "request_id": req.request_id,
                                        "fault": r.rule.name, "effect": r.effect.name,
                                        "detail": r.detail or "applied (nothing to act on in this answer)",
                                        "method": req.method, "path": req.path}) + "\n")

    # -- one request ---------------------------------------------------------------------------------------

    async def _exchange(self, reader, writer, head) -> bool:
        method, version = head.first[0], head.first[2]
        keep = head.keeps_alive(True)
        target = head.origin_target()  # the path is what we route on
        path = target.split("?", 1)[0]
        try:
            framing = body_framing(head, True)
            if "100-continue" in head.tokens("expect"):
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # we read the body ourselves, so we say go on
            if admin.is_admin(path):
                body = await read_whole(reader, framing, 1024 * 1024, self.body_timeout) or b""
                status, obj = admin.handle(self, method, path, head.get(FAULT_TOKEN_HEADER), body)
                await send_json(writer, status, obj, keep, [("Allow", admin.allowed(path))] if status == 405 else [],
                                head_only=method == "HEAD")
                return keep
            if framing[0] == "length" and framing[1] > BUFFER_LIMIT:
                body = ...  # a large Content-Length body: streamed to the upstream as it comes
            else:
                body = await read_whole(reader, framing, BUFFER_LIMIT, self.body_timeout)
        except HTTPError as e:
            await send_json(writer, e.status, error_body(e.status, str(e)), keep=False)
            if e.status == 413:
                await linger(reader)
            return False
        req = Request(method, path, head.get("x-request-id"), body if isinstance(body, bytes) else None)
        runs = [Run(r, r.effect) for r in list(self._rules.values()) if r.consider(req)] if self._rules else []
        ex = Exchange(self, writer, version, keep, req, runs)
        try:
            return await self._forward(reader, head, target, framing, body, ex)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug of ours: say so, answer 500 if we still can, and keep serving others
            traceback.print_exc(file=sys.stderr)
            if not ex.answered:
                ex.keep = False
                await ex.respond(500, json.dumps(openai_error(
                    f"llm-chaos proxy: internal error {type(e).__name__}: {e}; please report it")).encode(), [])
            return False
        finally:
            if runs:
                self._log_runs(req, runs)

    async def _forward(self, reader, head, target, framing, body, ex: Exchange) -> bool:
        runs = ex.runs
        for run in runs:
            if run.effect.kind == "request" and run.active:
                await run.effect.before(run, ex)
        for run in runs:
            if run.effect.kind == "answer" and run.active:
                await run.effect.answer(run, ex)
                if ex.answered:
                    # the other rules did not get to act: say so in their log lines, keep them out of the header
                    return ex.keep
        paced = next((run.effect.pace(run) for run in runs if run.effect.kind == "request" and run.effect.pace(run)),
                     None)
        alters = any(r.effect.kind in ("stream", "content") for r in runs)
        u = self.upstream
        drop = ("host", "content-length", "expect") + (("accept-encoding",) if alters else ())
        hs = head.end_to_end(drop) + [("Host", u.host_header)]
        if alters:
            hs.append(("Accept-Encoding", "identity"))  # the faults read the text: no gzip on this one
        if body is ...:
            hs.append(("Content-Length", str(framing[1])))
        elif body is not None:
            hs.append(("Content-Length", str(len(body))))
        out_head = encode_head(f"{head.first[0]} {u.base}{target} HTTP/1.1", hs)
        for attempt in range(2):
            try:
                r, w, reused = await self._connect(fresh=attempt > 0)
            except UpstreamError as e:
                return await self._bad_gateway(ex, e)
            ok = False
            try:
                try:
                    if paced is not None:
                        w.write(out_head)
                        await paced(w, _pieces(reader, framing, body))
                    elif body is ...:
                        w.write(out_head)
                        async for piece in iter_body(reader, framing):
                            w.write(piece)
                            await w.drain()
                    else:
                        w.write(out_head + body if body else out_head)
                    await w.drain()
                    resp = await read_head(r, False)
                    while resp is not None and resp.first[1].startswith("1") and resp.first[1] != "101":
                        resp = await read_head(r, False)  # 100 Continue and friends: ours to swallow
                    if resp is None:
                        raise ConnectionResetError("the upstream closed the connection without answering")
                except (OSError, asyncio.IncompleteReadError, HTTPError) as e:
                    if reused and attempt == 0 and (body is None or isinstance(body, bytes)) and paced is None \
                            and not isinstance(e, HTTPError):
                        continue  # a kept-alive connection the upstream had closed: once more on a fresh one
                    raise UpstreamError(f"{type(e).__name__}: {e}") from None
                ok, result = await relay_response(r, w, resp, head.first[0], ex)
                return result
            except UpstreamError as e:
                return await self._bad_gateway(ex, e)
            finally:
                if ok:
                    self.pool.put(r, w)
                else:
                    w.close()
        return False  # not reached: the second attempt returns

    async def _bad_gateway(self, ex: Exchange, e: Exception) -> bool:
        if ex.answered:
            return False  # the head went out already: all that is left is to close
        body = openai_error(f"llm-chaos proxy: the upstream {self.upstream.url} failed: {e}", "server_error",
                            "upstream_error")
        ex.runs = [r for r in ex.runs if r.detail]
        await ex.respond(502, json.dumps(body).encode(), [])
        return ex.keep

    async def _connect(self, fresh: bool = False):
        try:
            return await self.pool.get(fresh)
        except OSError as e:
            raise UpstreamError(f"cannot connect to {self.upstream.host}:{self.upstream.port}: {e}") from None

async def _pieces(reader, framing, body):
    if body is ...:
        async for piece in iter_body(reader, framing):
            yield piece
    elif body:
        yield body

