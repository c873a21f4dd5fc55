"""The OpenAI-compatible HTTP API, on aiohttp.

Why aiohttp rather than FastAPI + uvicorn: one dependency that is both server and
(for the gateway and fault proxy) client; every SSE chunk is an explicit write we
time and control; a client that goes away cancels its handler (handler_cancellation),
which aborts the request and frees its KV blocks at once; and validation is ours, so
a wrong type is a 400 in OpenAI's shape, never a framework's 422.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field

from aiohttp import web

from ..common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER, retry_after_headers
from .engine.async_engine import AsyncEngine, EngineDeadError
from .faults import ServerFaults
from .metrics import CONTENT_TYPE, ServerMetrics
from .openapi import server_spec
from .protocol import APIError, GenerationRequest, from_worker, parse_generation, parse_json_body
from .serving import (BodyTooLarge, BodyWorker, WorkerBusy, WorkerError, read_bounded, route_error,
                      route_headers)

log = logging.getLogger("chaos.reference")
# Bodies past this are parsed in the body worker's process (serving.BodyWorker), one at a time: json.loads holds
# the GIL ~30 ms a MB of numbers, which on the event loop (or a thread) would stall /health past the gateway's
# 1 s health timeout. Below it, parsing inline costs less than the hop.
LARGE_BODY = 256 * 1024
WORKER_QUEUE = 4  # large bodies waiting for the worker (each up to max_body_mb); more get 503 server_busy
ADMIN_BODY_LIMIT = 64 * 1024


class Timing:
    """A request's own times for chaos_timing: one wall-clock anchor at arrival, every later instant that anchor
    plus a monotonic interval (a wall-clock step mid-request cannot distort them)."""

    __slots__ = ("wall", "mono", "first_token", "end")

    def __init__(self):
        self.wall, self.mono = time.time(), time.monotonic()
        self.first_token: float | None = None  # monotonic
        self.end: float | None = None

    def end_now(self) -> dict:
        self.end = time.monotonic()
        ft = self.first_token
        return {"arrival": self.wall, "first_token": None if ft is None else self.wall + (ft - self.mono),
                "end": self.wall + (self.end - self.mono)}


@dataclass(slots=True)
class ServerSettings:
    model_name: str = "chaos-reference"
    replica_id: str = "r0"
    max_waiting: int = 256  # queued requests beyond this are refused (overload_status)
    overload_status: int = 429
    retry_after_s: float = 1.0
    default_max_tokens: int = 256  # chat requests without max_tokens
    drain_timeout_s: float = 30.0
    enable_fault_hooks: bool = False
    fault_seed: int | None = None
    fault_token: str | None = field(default=None, repr=False)  # required with fault hooks; never printed
    max_body_mb: int = 32
    header_timeout_s: float = 10.0  # a request's headers must arrive within this (slowloris)
    body_timeout_s: float = 30.0  # and its body within this, from when its headers did

    def __post_init__(self):
        if self.overload_status not in (429, 503):
            raise ValueError("overload_status must be 429 or 503")
        if self.max_waiting < 0 or self.default_max_tokens < 1 or self.drain_timeout_s < 0:
            raise ValueError("max_waiting and drain_timeout_s must be >= 0, default_max_tokens >= 1")
        if not self.retry_after_s > 0 or self.retry_after_s > 86400:
            raise ValueError("retry_after must be in (0, 86400] seconds")
        if not 0 < self.header_timeout_s <= 3600 or not 0 < self.body_timeout_s <= 3600:
            raise ValueError("header_timeout and body_timeout must be in (0, 3600] seconds")
        if self.enable_fault_hooks and not self.fault_token:
            raise ValueError(f"fault hooks need a token: set the environment variable {FAULT_TOKEN_ENV} to a "
                             f"secret value, and send it as the header {FAULT_TOKEN_HEADER} on /admin/faults")


class ReferenceAPI:
    def __init__(self, settings: ServerSettings, engine: AsyncEngine):
        self.settings = settings
        self.engine = engine
        self.metrics = ServerMetrics(engine, settings.model_name)
        self.faults = ServerFaults(engine, settings.fault_seed)
        self.draining = False
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.started = int(time.time())
        self.body_worker = BodyWorker("chaos.reference.protocol:parse_for_worker", max_waiting=WORKER_QUEUE)
        s = settings
        self.spec = server_spec(model_name=s.model_name, max_model_len=engine.config.max_model_len,
                                max_body_mb=s.max_body_mb, fault_hooks=s.enable_fault_hooks)

    def close(self) -> None:
        self.body_worker.close()

    # -- app --------------------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=self.settings.max_body_mb * 2**20)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/openapi.json", self.openapi)
        if self.settings.enable_fault_hooks:
            app.router.add_get("/admin/faults", self.faults_get)
            app.router.add_post("/admin/faults", self.faults_post)
            app.router.add_delete("/admin/faults", self.faults_delete)
            app.router.add_delete("/admin/faults/{name}", self.faults_delete)
        return app

    def _headers(self, request_id: str) -> dict:
        return {"x-request-id": request_id, "x-served-by": self.settings.replica_id}

    def error_response(self, e: APIError, headers: dict | None = None) -> web.Response:
        self.metrics.http_errors.labels(self.settings.model_name, str(e.status), e.code or "").inc()
        resp = web.json_response(e.body(), status=e.status, headers={**(headers or {}), **e.headers})
        if e.status == 413:
            resp.force_close()  # the rest of the body is never read: this connection cannot carry another request
        return resp

    def _too_large(self, size: int | None, limit: int | None = None) -> APIError:
        e = BodyTooLarge(size, limit or self.settings.max_body_mb * 2**20)
        return APIError(413, str(e), code="request_too_large")

    async def _read_body(self, request: web.Request, limit: int | None = None) -> bytes:
        try:
            return await read_bounded(request, limit or self.settings.max_body_mb * 2**20)
        except BodyTooLarge as e:
            raise self._too_large(e.size, e.limit) from None

    def _authorize(self, request: web.Request) -> None:
        given = request.headers.get(FAULT_TOKEN_HEADER, "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, self.settings.fault_token.encode("utf-8")):
            log.warning("refused %s %s: missing or wrong %s", request.method, request.path, FAULT_TOKEN_HEADER)
            raise APIError(401, f"The fault routes need the header {FAULT_TOKEN_HEADER} with the token this server "
                                f"was started with (its CHAOS_FAULT_TOKEN).", code="invalid_fault_token")

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            if self.settings.enable_fault_hooks and request.path.startswith("/admin/"):
                self._authorize(request)
            return await handler(request)
        except APIError as e:
            return self.error_response(e, self._headers(rid))
        except web.HTTPRequestEntityTooLarge:
            return self.error_response(self._too_large(request.content_length), self._headers(rid))
        except web.HTTPException as e:
            if e.status < 400:
                raise
            msg, code = route_error(request, e)
            return self.error_response(APIError(e.status, msg, code=code),
                                       {**self._headers(rid), **route_headers(e)})
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:  # a bug of ours: say so in OpenAI's shape, keep serving
            log.exception("unhandled error on %s", request.path)
            return self.error_response(APIError(500, f"internal error: {e!r}", type="server_error",
                                                code="internal_error"), self._headers(rid))

    # -- plain endpoints ----------------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        s = self.settings
        card = {"id": s.model_name, "object": "model", "created": self.started, "owned_by": "llm-chaos",
                "root": s.model_name, "max_model_len": self.engine.config.max_model_len}
        return web.json_response({"object": "list", "data": [card]}, headers={"x-served-by": s.replica_id})

    async def health(self, request: web.Request) -> web.Response:
        ok = not self.draining and self.engine.dead is None
        return web.Response(status=200 if ok else 503, headers={"x-served-by": self.settings.replica_id})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self.spec)

    async def faults_get(self, request):
        return web.json_response(self.faults.describe())

    async def faults_post(self, request):
        raw = await self._read_body(request, ADMIN_BODY_LIMIT)
        body = parse_json_body(raw, request.headers.get("Content-Type", ""))
        return web.json_response(self.faults.apply(body))

    async def faults_delete(self, request):
        return web.json_response(self.faults.revert(request.match_info.get("name")))

    # -- generation -------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    def _refuse_early(self) -> None:
        """What refuses a request whatever its body says: checked before the body is read, and again after it
        is parsed (the server may have begun draining, or its queue filled, meanwhile)."""
        s = self.settings
        retry = retry_after_headers(s.retry_after_s)
        if self.draining:
            raise APIError(503, "The server is shutting down and accepts no new requests.", type="server_error",
                           code="server_draining", headers=retry)
        if self.engine.dead is not None:
            raise APIError(503, "The inference engine has stopped; this replica cannot serve.",
                           type="server_error", code="engine_dead")
        if self.engine.num_waiting >= s.max_waiting:
            msg = f"The request queue is full ({s.max_waiting} waiting); retry after {s.retry_after_s:g}s."
            if s.overload_status == 429:
                raise APIError(429, msg, type="requests", code="rate_limit_exceeded", headers=retry)
            raise APIError(503, msg, type="server_error", code="overloaded", headers=retry)

    def _admit(self) -> None:
        self._refuse_early()
        if self.faults.should_fail():  # a fault of valid requests only: a client's own 4xx comes first
            raise APIError(500, "Injected fault: fail_fraction", type="server_error", code="injected_fault")

    def _busy(self) -> APIError:
        s = self.settings
        return APIError(503, f"{WORKER_QUEUE} large request bodies already wait to be parsed; retry after "
                             f"{s.retry_after_s:g}s.", type="server_error", code="server_busy",
                        headers=retry_after_headers(s.retry_after_s))

    def _parse(self, raw: bytes, content_type: str, kind: str) -> GenerationRequest:
        s, eng = self.settings, self.engine
        return parse_generation(parse_json_body(raw, content_type), kind, s.model_name, eng.config.max_model_len,
                                s.default_max_tokens, eng.engine.tokenizer)

    async def _parse_large(self, raw: bytes, content_type: str, kind: str) -> GenerationRequest:
        s = self.settings
        meta = {"content_type": content_type, "kind": kind, "model_name": s.model_name,
                "max_model_len": self.engine.config.max_model_len, "default_max_tokens": s.default_max_tokens}
        try:
            return from_worker(await self.body_worker.call(raw, meta))
        except WorkerBusy:
            raise self._busy() from None
        except WorkerError as e:
            log.warning("%s", e)
            raise APIError(500, f"This request's body could not be parsed: {e}", type="server_error",
                           code="internal_error") from None

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        timing = Timing()
        client_rid = request.headers.get("x-request-id")
        rid = uuid.uuid4().hex
        headers = self._headers(client_rid or rid)
        try:
            self._refuse_early()
            if (request.content_length or 0) > LARGE_BODY and self.body_worker.busy:
                raise self._busy()  # before its megabytes are read
            raw, ctype = await self._read_body(request), request.headers.get("Content-Type", "")
            req = await self._parse_large(raw, ctype, kind) if len(raw) > LARGE_BODY else self._parse(raw, ctype, kind)
            del raw
            self._admit()
            if self.engine.config.build.fails(req.prompt_ids):
                raise APIError(500, "This build fails on this prompt (--error-fraction).", type="server_error",
                               code="build_error")
            self.faults.check_wedge(req.prompt_ids, self.engine.config.max_model_len)
        except APIError as e:
            return self.error_response(e, headers)
        self.in_flight += 1
        self.idle.clear()
        try:
            if req.stream:
                return await self._stream(request, req, rid, headers, timing)
            return await self._complete(req, rid, headers, timing)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.idle.set()

    def _observe(self, out, state: dict, now: float) -> None:
        if out.queue_time is not None:
            self.metrics.queue.observe(out.queue_time)
        if out.token_ids:
            last = state.get("last")
            if last is None:
                self.metrics.ttft.observe(now - state["arrival"])
            else:
                self.metrics.itl.observe(now - last)
            state["last"] = now
        if out.finished:
            self.metrics.e2e.observe(now - state["arrival"])
            self.metrics.success.labels(self.settings.model_name, out.finish_reason).inc()

    @staticmethod
    def _failed(out) -> APIError:
        """A request the engine ended with finish_reason error: its own status (engine/llm_engine.py)."""
        message = out.error or "generation failed"
        if out.error_status == 400:
            return APIError(400, message, code="invalid_request")
        if out.error_status == 500:
            return APIError(500, message, type="server_error", code="internal_error")
        return APIError(503, message, type="server_error", code="generation_failed")

    def _usage(self, out) -> dict:
        return {"prompt_tokens": out.num_prompt_tokens, "completion_tokens": out.num_output_tokens,
                "total_tokens": out.num_prompt_tokens + out.num_output_tokens,
                "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}

    async def _complete(self, req: GenerationRequest, rid: str, headers: dict, timing: Timing) -> web.Response:
        text, last, state = [], None, {"arrival": timing.mono}
        try:
            async with aclosing(self.engine.generate(rid, req.prompt_ids, req.params)) as gen:
                async for out in gen:
                    now = time.monotonic()
                    self._observe(out, state, now)
                    if out.text and timing.first_token is None:
                        timing.first_token = now
                    text.append(out.text)
                    last = out
        except EngineDeadError as e:
            return self.error_response(APIError(503, str(e), type="server_error", code="engine_dead"), headers)
        if last.finish_reason == "error":
            return self.error_response(self._failed(last), headers)
        s = self.settings
        base = {"id": ("chatcmpl-" if req.kind == "chat" else "cmpl-") + rid, "created": int(time.time()),
                "model": s.model_name, "system_fingerprint": s.replica_id}
        if req.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                      "logprobs": None, "finish_reason": last.finish_reason}
            body = {**base, "object": "chat.completion", "choices": [choice]}
        else:
            choice = {"index": 0, "text": "".join(text), "logprobs": None, "finish_reason": last.finish_reason}
            body = {**base, "object": "text_completion", "choices": [choice]}
        body["usage"] = self._usage(last)
        body["chaos_timing"] = timing.end_now()
        return web.json_response(body, headers=headers)

    async def _stream(self, request: web.Request, req: GenerationRequest, rid: str, headers: dict,
                      timing: Timing) -> web.StreamResponse:
        s = self.settings
        chat = req.kind == "chat"
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        base = {"id": ("chatcmpl-" if chat else "cmpl-") + rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": s.model_name, "system_fingerprint": s.replica_id}

        def chunk(content: str | None, finish: str | None = None, role: bool = False) -> bytes:
            if chat:
                delta = {} if content is None else {"content": content}
                if role:
                    delta = {"role": "assistant", "content": ""}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}
            c = {**base, "choices": [choice]}
            if finish is not None:
                c["chaos_timing"] = timing.end_now()
            return b"data: " + json.dumps(c).encode() + b"\n\n"

        state, last, first = {"arrival": timing.mono}, None, True
        try:
            async with aclosing(self.engine.generate(rid, req.prompt_ids, req.params)) as gen:
                async for out in gen:
                    self._observe(out, state, time.monotonic())
                    last = out
                    if out.finish_reason == "error":
                        break
                    data = b""
                    if first and chat:
                        data += chunk(None, role=True)
                    first = False
                    if out.text:
                        if timing.first_token is None:
                            timing.first_token = time.monotonic()  # written right below
                        data += chunk(out.text)
                    if out.finished:
                        data += chunk(None, finish=out.finish_reason)
                    if data:
                        await resp.write(data)
            if last is not None and last.finish_reason == "error":
                await resp.write(b"data: " + json.dumps(self._failed(last).body()).encode() + b"\n\n")
            elif req.include_usage and last is not None:
                usage = {**base, "choices": [], "usage": self._usage(last)}
                await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        except EngineDeadError as e:
            err = APIError(503, str(e), type="server_error", code="engine_dead")
            await resp.write(b"data: " + json.dumps(err.body()).encode() + b"\n\n")
        except ConnectionResetError:
            return resp  # the client left; the generator's exit already aborted the request
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

