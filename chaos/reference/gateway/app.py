"""The gateway's HTTP side: admission, attempts with per-attempt timeouts and bounded retries, the fallback
chain, and streaming passed through without buffering.

A retry is only ever made while nothing has been sent to the client: a streamed response is committed
when the upstream's first data arrives, and from then on an upstream failure becomes an error event and
[DONE] for that one client.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid

import aiohttp
from aiohttp import web

from ...common import parse_retry_after
from .cache import Answer, AnswerCache, cache_key
from .metrics import GatewayMetrics
from .settings import GatewaySettings
from .stream import SSECollector, answer_from_json, synthesize
from .upstreams import LatencyTracker, Pool, Upstream, health_loop

RETRYABLE = {408, 409, 429}


class Failure:
    """An attempt that failed before anything reached the client: safe to retry elsewhere."""

    __slots__ = ("reason", "retry_after", "status")

    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None):
        self.reason, self.retry_after, self.status = reason, retry_after, status


def error_body(message: str, code: str, type_: str = "server_error") -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class Gateway:
    def __init__(self, settings: GatewaySettings, primaries: list[tuple[str, str]],
                 backups: list[tuple[str, str]] = (), name: str = "gateway"):
        if not primaries:
            raise ValueError("the gateway needs at least one primary upstream")
        self.settings, self.name = settings, name
        self.primary = Pool("primary", [Upstream(n, u, settings, "primary") for n, u in primaries])
        self.backup = Pool("backup", [Upstream(n, u, settings, "backup") for n, u in backups])
        self.cache = AnswerCache(settings.cache_size, settings.cache_ttl_s)
        self.latency = LatencyTracker()
        self.rng = random.Random(settings.seed)
        self.slots = asyncio.Semaphore(settings.max_concurrency)
        self.in_flight = 0
        self.queued = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()
        self.metrics = GatewayMetrics(self)
        self.session: aiohttp.ClientSession | None = None
        self._health_task = None

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(connector=conn, auto_decompress=False)
        self._health_task = asyncio.create_task(health_loop([self.primary, self.backup], self.settings,
                                                            self.session))

    async def close(self) -> None:
        if self._health_task:
            self._health_task.cancel()
        if self.session:
            await self.session.close()

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/gateway/state", self.state)
        return app

    # -- small endpoints -------------------------------------------------------------------------------
    async def health(self, request):
        return web.Response(status=503 if self.draining else 200, headers={"x-served-by": self.name})

    async def prometheus(self, request):
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def state(self, request):
        now = time.monotonic()
        return web.json_response({p.name: {u.name: {"state": u.state(now), "outstanding": u.outstanding,
                                                    "breaker": u.breaker.state, "served": u.served}
                                           for u in p.upstreams} for p in (self.primary, self.backup)}
                                 | {"cache_entries": len(self.cache), "in_flight": self.in_flight,
                                    "queued": self.queued})

    async def models(self, request):
        for pool in (self.primary, self.backup):
            u = pool.pick(set())
            if u is None:
                continue
            try:
                async with self.session.get(u.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    return web.Response(body=await r.read(), status=r.status,
                                        headers={"Content-Type": "application/json", "x-served-by": u.name})
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                continue
        return web.json_response(error_body("no upstream can list models now", "all_upstreams_unavailable"),
                                 status=503, headers={"retry-after": "1"})

    # -- generation -------------------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, code: str, rid: str) -> web.Response:
        self.metrics.rejected.labels(code).inc()
        s = self.settings.retry_after_s
        return web.json_response(error_body(message, code, "requests" if status == 429 else "server_error"),
                                 status=status, headers={"retry-after": str(max(1, round(s))),
                                                         "retry-after-ms": str(int(s * 1000)),
                                                         "x-request-id": rid, "x-served-by": self.name})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        raw = await request.read()
        try:
            body = json.loads(raw)
            body = body if isinstance(body, dict) else None
        except ValueError:
            body = None  # forwarded as is: the replica says what is wrong with it
        if self.draining:
            return self._refuse(503, "the gateway is shutting down", "gateway_draining", rid)
        if self.slots.locked() and self.queued >= self.settings.max_queue:
            return self._refuse(429, f"too many requests: {self.settings.max_concurrency} in flight and "
                                     f"{self.queued} queued", "rate_limit_exceeded", rid)
        self.queued += 1
        try:
            await asyncio.wait_for(self.slots.acquire(), self.settings.queue_timeout_s)
        except asyncio.TimeoutError:
            return self._refuse(429, "waited too long for a free slot", "queue_timeout", rid)
        finally:
            self.queued -= 1
        self.in_flight += 1
        self.idle.clear()
        try:
            return await self._serve(request, raw, body, rid)
        finally:
            self.in_flight -= 1
            self.slots.release()
            if self.in_flight == 0:
                self.idle.set()

    async def _serve(self, request, raw: bytes, body: dict | None, rid: str) -> web.StreamResponse:
        path = request.path
        stream = bool(body and body.get("stream"))
        s = self.settings
        tried: set[str] = set()
        retry_after = None
        for attempt in range(1 + s.retries):
            # Prefer a replica not tried yet; with none left, the same one again after the backoff.
            u = self.primary.pick(tried) or self.primary.pick(set())
            if u is None:
                break
            if attempt:
                await asyncio.sleep(self._backoff(attempt, retry_after))
                self.metrics.retries.inc()
                u = self.primary.pick(tried) or self.primary.pick(set())
                if u is None:
                    break
            tried.add(u.name)
            out = await self._attempt(request, u, path, raw, body, stream, rid, served_as=None, attempts=attempt + 1)
            if not isinstance(out, Failure):
                return out
            retry_after = out.retry_after
        # Every primary is failing (or was tried): the fallback chain.
        tried_backup: set[str] = set()
        while (u := self.backup.pick(tried_backup)) is not None:
            tried_backup.add(u.name)
            out = await self._attempt(request, u, path, raw, body, stream, rid, served_as="backup",
                                      attempts=len(tried) + len(tried_backup))
            if not isinstance(out, Failure):
                self.metrics.fallbacks.labels("backup").inc()
                return out
        if body is not None:
            answer = self.cache.get(cache_key(path, body))
            if answer is not None:
                self.metrics.fallbacks.labels("cache").inc()
                return await self._from_cache(request, answer, path, body, stream, rid)
        self.metrics.fallbacks.labels("unavailable").inc()
        return self._refuse(503, "every upstream is failing and no cached answer fits; retry later",
                            "all_upstreams_unavailable", rid)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            return min(retry_after, s.retry_after_cap_s)
        base = min(s.backoff_max_s, s.backoff_base_s * 2 ** (attempt - 1))
        return base * (0.5 + self.rng.random() * 0.5)  # jitter: between half and all of it

    async def _attempt(self, request, u: Upstream, path, raw, body, stream, rid, served_as, attempts):
        s = self.settings
        first_timeout = self.latency.timeout("first_token", s.first_token_timeout, s.auto_floor_s, s.auto_default_s)
        total_timeout = self.latency.timeout("total", s.total_timeout, s.auto_floor_s, 12 * s.auto_default_s)
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json"), "x-request-id": rid}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        probing = u.breaker.begin()
        u.outstanding += 1
        t0 = time.monotonic()
        resp = None
        committed = None
        loop = asyncio.get_running_loop()
        try:
            try:
                # asyncio.timeout rather than wait_for: no extra task per await on the hot path.
                async with asyncio.timeout(first_timeout):
                    resp = await self.session.post(u.url + path, data=raw, headers=headers)
                    if resp.status >= 500 or resp.status in RETRYABLE:
                        await resp.read()
                        u.record(False)
                        return Failure(f"HTTP {resp.status}", parse_retry_after(resp.headers), resp.status)
                    served = served_as or resp.headers.get("x-served-by") or u.name
                    out_headers = {"x-request-id": rid, "x-served-by": served, "x-gateway-attempts": str(attempts),
                                   "x-upstream": u.name}
                    if resp.status >= 400:  # the client's mistake: pass it through, never retry it
                        data = await resp.read()
                        u.record(True)
                        return web.Response(body=data, status=resp.status, headers={
                            **out_headers, "Content-Type": resp.headers.get("Content-Type", "application/json")})
                    if stream:
                        first = await resp.content.readany()
                if not stream:
                    async with asyncio.timeout_at(loop.time() + max(0.001, total_timeout - (time.monotonic() - t0))):
                        data = await resp.read()
                    u.record(True)
                    self.latency.total.append(time.monotonic() - t0)
                    self._remember(path, body, answer_from_json(data))
                    self.metrics.served.labels(served_as or u.pool).inc()
                    return web.Response(body=data, status=resp.status, headers={
                        **out_headers, "Content-Type": resp.headers.get("Content-Type", "application/json")})
                if not first:
                    u.record(False)
                    return Failure("the stream ended before any data")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                u.record(False)
                return Failure(type(e).__name__)
            # Commit: from here on nothing is retried.
            self.latency.ttft.append(time.monotonic() - t0)
            committed = web.StreamResponse(status=200, headers={**out_headers, "Content-Type": "text/event-stream",
                                                                "Cache-Control": "no-cache"})
            await committed.prepare(request)
            collector = SSECollector(keep=self.settings.cache_size > 0 and body is not None)
            collector.feed(first)
            await committed.write(first)
            upstream_failed = None
            try:
                async with asyncio.timeout_at(loop.time() + max(0.001, total_timeout - (time.monotonic() - t0))):
                    while True:
                        try:
                            chunk = await resp.content.readany()
                        except (aiohttp.ClientError, OSError) as e:
                            upstream_failed = f"upstream {u.name} failed mid-stream: {type(e).__name__}"
                            break
                        if not chunk:
                            break
                        collector.feed(chunk)
                        await committed.write(chunk)  # as it came: token by token
            except asyncio.TimeoutError:
                upstream_failed = f"upstream {u.name} passed the total timeout ({total_timeout:.1f}s) mid-stream"
            if upstream_failed is None and not collector.done:
                upstream_failed = f"upstream {u.name} ended the stream without [DONE]"
            if upstream_failed:
                u.record(False)
                self.metrics.midstream_failures.inc()
                err = error_body(upstream_failed, "upstream_failed")
                await committed.write(b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n")
            else:
                u.record(not collector.error)
                self.latency.total.append(time.monotonic() - t0)
                if not collector.error:
                    self._remember(path, body, collector.answer())
            await committed.write_eof()
            self.metrics.served.labels(served_as or u.pool).inc()
            return committed
        except ConnectionResetError:
            return committed  # the client left: the finally closes the upstream, which aborts it there too
        finally:
            u.outstanding -= 1
            if probing and u.breaker.probe_in_flight:
                u.breaker.abandon_probe()  # no verdict (cancelled, client gone): never leave it half-open forever
            if resp is not None:
                if committed is not None and not resp.content.at_eof():
                    resp.close()
                else:
                    resp.release()

    def _remember(self, path, body, answer) -> None:
        if body is None or answer is None:
            return
        text, finish, usage, model = answer
        self.cache.put(cache_key(path, body), Answer(text, finish, usage, model or body.get("model", ""),
                                                     time.monotonic()))

    async def _from_cache(self, request, answer: Answer, path, body, stream, rid):
        kind = "chat" if path.endswith("chat/completions") else "completion"
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        built = synthesize(kind, rid, answer.model, answer.text, answer.finish_reason, answer.usage, stream,
                           include_usage, "cache")
        headers = {"x-request-id": rid, "x-served-by": "cache", "x-gateway-attempts": "0"}
        if not stream:
            return web.json_response(built, headers=headers)
        out = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(built)
        await out.write_eof()
        return out
