"""The OpenAI-compatible HTTP API, on aiohttp.

Why aiohttp rather than FastAPI + uvicorn: one dependency that is both server and
(for the gateway and fault proxy) client; every SSE chunk is an explicit write we
time and control; a client that goes away cancels its handler (handler_cancellation),
which aborts the request and frees its KV blocks at once; and validation is ours, so
a wrong type is a 400 in OpenAI's shape, never a framework's 422.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass

from aiohttp import web

from .engine.async_engine import AsyncEngine, EngineDeadError
from .faults import ServerFaults
from .metrics import CONTENT_TYPE, ServerMetrics
from .protocol import APIError, GenerationRequest, parse_generation, parse_json_body

log = logging.getLogger("chaos.reference")


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
    max_body_mb: int = 32

    def __post_init__(self):
        if self.overload_status not in (429, 503):
            raise ValueError("overload_status must be 429 or 503")
        if self.max_waiting < 0 or self.default_max_tokens < 1 or self.drain_timeout_s < 0:
            raise ValueError("max_waiting and drain_timeout_s must be >= 0, default_max_tokens >= 1")


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

    # -- app --------------------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=self.settings.max_body_mb * 2**20)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
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
        return web.json_response(e.body(), status=e.status, headers={**(headers or {}), **e.headers})

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            return await handler(request)
        except APIError as e:
            return self.error_response(e, self._headers(rid))
        except web.HTTPRequestEntityTooLarge as e:
            return self.error_response(APIError(413, f"request body too large ({e.actual_size} bytes; limit "
                                                     f"{e.max_size})", code="request_too_large"), self._headers(rid))
        except web.HTTPException as e:
            if e.status < 400:
                raise
            msg = {404: f"no route for {request.method} {request.path}",
                   405: f"{request.method} is not allowed on {request.path}"}.get(e.status, e.reason)
            return self.error_response(APIError(e.status, msg, code=e.reason.lower().replace(" ", "_")),
                                       self._headers(rid))
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

    async def faults_get(self, request):
        return web.json_response(self.faults.describe())

    async def faults_post(self, request):
        body = parse_json_body(await request.read(), request.headers.get("Content-Type", ""))
        return web.json_response(self.faults.apply(body))

    async def faults_delete(self, request):
        return web.json_response(self.faults.revert(request.match_info.get("name")))

    # -- generation -------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    def _admit(self) -> None:
        s = self.settings
        retry = {"retry-after": str(max(1, round(s.retry_after_s))), "retry-after-ms": str(int(s.retry_after_s * 1000))}
        if self.draining:
            raise APIError(503, "The server is shutting down and accepts no new requests.", type="server_error",
                           code="server_draining", headers=retry)
        if self.engine.dead is not None:
            raise APIError(503, "The inference engine has stopped; this replica cannot serve.",
                           type="server_error", code="engine_dead")
        if self.faults.should_fail():
            raise APIError(500, "Injected fault: fail_fraction", type="server_error", code="injected_fault")
        if self.engine.num_waiting >= s.max_waiting:
            msg = f"The request queue is full ({s.max_waiting} waiting); retry after {s.retry_after_s:g}s."
            if s.overload_status == 429:
                raise APIError(429, msg, type="requests", code="rate_limit_exceeded", headers=retry)
            raise APIError(503, msg, type="server_error", code="overloaded", headers=retry)

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        t_arrival = time.monotonic()
        client_rid = request.headers.get("x-request-id")
        rid = uuid.uuid4().hex
        headers = self._headers(client_rid or rid)
        try:
            body = parse_json_body(await request.read(), request.headers.get("Content-Type", ""))
            s, eng = self.settings, self.engine
            req = parse_generation(body, kind, s.model_name, eng.config.max_model_len, s.default_max_tokens,
                                   eng.engine.tokenizer)
            self._admit()
        except APIError as e:
            return self.error_response(e, headers)
        self.in_flight += 1
        self.idle.clear()
        try:
            if req.stream:
                return await self._stream(request, req, rid, headers, t_arrival)
            return await self._complete(req, rid, headers, t_arrival)
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

    def _usage(self, out) -> dict:
        return {"prompt_tokens": out.num_prompt_tokens, "completion_tokens": out.num_output_tokens,
                "total_tokens": out.num_prompt_tokens + out.num_output_tokens,
                "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}

    async def _complete(self, req: GenerationRequest, rid: str, headers: dict, t0: float) -> web.Response:
        text, last, state = [], None, {"arrival": t0}
        try:
            async with aclosing(self.engine.generate(rid, req.prompt_ids, req.params)) as gen:
                async for out in gen:
                    self._observe(out, state, time.monotonic())
                    text.append(out.text)
                    last = out
        except EngineDeadError as e:
            return self.error_response(APIError(503, str(e), type="server_error", code="engine_dead"), headers)
        if last.finish_reason == "error":
            return self.error_response(APIError(503, last.error or "generation failed", type="server_error",
                                                code="generation_failed"), headers)
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
        return web.json_response(body, headers=headers)

    async def _stream(self, request: web.Request, req: GenerationRequest, rid: str, headers: dict,
                      t0: float) -> web.StreamResponse:
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
            return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

        state, last, first = {"arrival": t0}, None, True
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
                        data += chunk(out.text)
                    if out.finished:
                        data += chunk(None, finish=out.finish_reason)
                    if data:
                        await resp.write(data)
            if last is not None and last.finish_reason == "error":
                err = APIError(503, last.error or "generation failed", type="server_error", code="generation_failed")
                await resp.write(b"data: " + json.dumps(err.body()).encode() + b"\n\n")
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
