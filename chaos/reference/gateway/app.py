"""The gateway's HTTP side: routes, admission, and the chain a request goes down (primaries with bounded
retries, backups, a busy replica's 429, the answer cache, 503). One attempt at one upstream is attempt.py.

A retry is only ever made while nothing has been sent to the client: a streamed response is committed
when the upstream's first data arrives, and from then on an upstream failure becomes an error event and
[DONE] for that one client.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time

from ...common import retry_after_headers
from ...http1.server import CODES, StreamOut, linger, send
from ...http1.wire import HTTPError, body_framing
from ..openapi import gateway_spec
from .attempt import ANSWER, BUSY, Failure, attempt
from .body import parse_envelope, read_body
from .budget import RetryBudget
from .cache import Answer, AnswerCache, cache_key
from .call import Call, Reply, new_rid
from .errors import GatewayError, error_reply, log
from .metrics import GatewayMetrics
from .settings import GatewaySettings
from .stream import synthesize
from .upstreams import LatencyTracker, Pool, Upstream, health_loop


# path -> {method: handler}; a GET route answers HEAD too (the same head, no body)
ROUTES = {"/v1/chat/completions": {"POST": "generate"}, "/v1/completions": {"POST": "generate"},
          "/v1/models": {"GET": "models"}, "/health": {"GET": "health"}, "/metrics": {"GET": "prometheus"},
          "/gateway/state": {"GET": "state"}, "/openapi.json": {"GET": "openapi"}}


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
        self.budget = RetryBudget(settings.retry_budget_ratio, settings.retry_budget_window_s,
                                  settings.retry_budget_min)
        self.slots = asyncio.Semaphore(settings.max_concurrency)
        self.in_flight = 0
        self.queued = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()
        self.metrics = GatewayMetrics(self)
        self._health_task = None
        self._openapi: bytes | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        self._health_task = asyncio.create_task(health_loop([self.primary, self.backup], self.settings))

    async def close(self) -> None:
        if self._health_task:
            self._health_task.cancel()
        for u in self.primary.upstreams + self.backup.upstreams:
            u.conns.close()
            u.probes.close()

    # -- one request --------------------------------------------------------------------------------------
    async def handle(self, reader, writer, head) -> bool:
        """Route one request and answer it (http1.server.Server's handler); whether the connection may serve another."""
        method = head.first[0]
        path = head.origin_target().split("?", 1)[0]  # the path is what we route on
        call = Call(reader, writer, head, path, head.keeps_alive(True), head.get("x-request-id") or new_rid())
        try:
            call.expect_body(body_framing(head, True))
            routes = ROUTES.get(path)
            if routes is None:
                raise GatewayError(404, f"no route for {method} {path}", "not_found")
            name = routes.get("GET" if method == "HEAD" else method)
            if name is None:
                allow = ", ".join([*routes, "HEAD"] if "GET" in routes else routes)
                raise GatewayError(405, f"{method} is not allowed on {path}", "method_not_allowed",
                                   headers={"Allow": allow})
            out = await getattr(self, name)(call)
        except GatewayError as e:
            out = error_reply(e, {"x-request-id": call.rid, "x-served-by": self.name})
        except HTTPError as e:  # bad framing, a body too slow: answered, and the connection closes
            call.keep = False
            out = error_reply(GatewayError(e.status, str(e), CODES.get(e.status, "invalid_http_request")),
                              {"x-request-id": call.rid, "x-served-by": self.name})
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            raise
        except Exception as e:
            log.exception("unhandled error on %s %s", method, path)
            if call.out is not None and call.out.started:
                return False  # the answer has begun: all that is left is to close
            out = error_reply(GatewayError(500, f"internal error in the gateway: {type(e).__name__}",
                                           "internal_error"), {"x-request-id": call.rid, "x-served-by": self.name})
        if isinstance(out, StreamOut):
            return call.keep and out.chunked
        call.drop_buffered_body()
        keep = call.keep and call.body_read  # an unread body: never read the next request out of step
        await send(writer, out.status, out.body, list((out.headers or {}).items()), keep, out.content_type,
                   head_only=method == "HEAD")
        if not call.body_read:
            await linger(reader)
        return keep

    # -- small endpoints -------------------------------------------------------------------------------
    async def health(self, call: Call) -> Reply:
        return Reply(503 if self.draining else 200, b"", {"x-served-by": self.name}, None)

    async def openapi(self, call: Call) -> Reply:
        if self._openapi is None:
            names, context = await self._served_models()
            body = json.dumps(gateway_spec(max_body_mb=self.settings.max_body_mb, model_names=names,
                                           max_model_len=context)).encode()
            if names is None:  # no upstream listed its models: not kept, the next request asks again
                return Reply(200, body)
            self._openapi = body
        return Reply(200, self._openapi)

    async def _served_models(self) -> tuple[list[str] | None, int | None]:
        """The model ids an upstream lists at /v1/models, and their smallest context when each gives one, for the
        document (so a client generated from it sends a name the replicas serve); (None, None) when none can say."""
        for pool in (self.primary, self.backup):
            u = pool.pick(set())
            got = await self._list_models(u) if u is not None else None
            if got is None or got[0] != 200:
                continue
            try:
                data = json.loads(got[1])["data"]
                names = [m["id"] for m in data if isinstance(m.get("id"), str)]
                contexts = [m.get("max_model_len") for m in data]
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if names:
                known = all(type(c) is int and c > 1 for c in contexts)
                return names, (min(contexts) if known else None)
        return None, None

    async def _list_models(self, u) -> tuple[int, bytes] | None:
        """GET /v1/models of upstream u: (status, body), or None when it cannot be reached."""
        try:
            async with asyncio.timeout(5):
                return await u.conns.fetch("GET", "/v1/models")
        except (TimeoutError, OSError, asyncio.IncompleteReadError, HTTPError):
            return None

    async def prometheus(self, call: Call) -> Reply:
        return Reply(200, self.metrics.render(), None, "text/plain; version=0.0.4")

    async def state(self, call: Call) -> Reply:
        now = time.monotonic()
        return Reply.json({p.name: {u.name: {"state": u.state(now), "outstanding": u.outstanding,
                                             "breaker": u.breaker.state, "served": u.served}
                                    for u in p.upstreams} for p in (self.primary, self.backup)}
                          | {"cache_entries": len(self.cache), "in_flight": self.in_flight, "queued": self.queued})

    async def models(self, call: Call) -> Reply:
        for pool in (self.primary, self.backup):
            u = pool.pick(set())
            got = await self._list_models(u) if u is not None else None
            if got is not None:
                return Reply(got[0], got[1], {"x-served-by": u.name})
        raise GatewayError(503, "no upstream can list models now; retry later", "all_upstreams_unavailable",
                           retry_after=self.settings.retry_after_s)

    # -- generation -------------------------------------------------------------------------------------
    def _refuse(self, status: int, message: str, code: str, rid: str) -> Reply:
        self.metrics.rejected.labels(code).inc()
        return error_reply(GatewayError(status, message, code, retry_after=self.settings.retry_after_s),
                           {"x-request-id": rid, "x-served-by": self.name})

    async def generate(self, call: Call) -> Reply | StreamOut:
        rid = call.rid
        s = self.settings
        # Refusals that need no body first: a refused request costs no read.
        if self.draining:
            return self._refuse(503, "the gateway is shutting down", "gateway_draining", rid)
        if self.slots.locked() and self.queued >= s.max_queue:
            return self._refuse(429, f"too many requests: {s.max_concurrency} in flight and "
                                     f"{self.queued} queued", "rate_limit_exceeded", rid)
        raw = await read_body(call, s.max_body_bytes, s.body_timeout_s)
        body = parse_envelope(raw, s.inspect_max_kb * 1024)
        if self.slots.locked():  # wait_for costs a task: only a request that must queue pays for it
            self.queued += 1
            try:
                await asyncio.wait_for(self.slots.acquire(), s.queue_timeout_s)
            except TimeoutError:
                return self._refuse(429, "waited too long for a free slot", "queue_timeout", rid)
            finally:
                self.queued -= 1
        else:
            await self.slots.acquire()  # free: returns at once
        self.in_flight += 1
        self.idle.clear()
        try:
            return await self._serve(call, raw, body, rid)
        finally:
            self.in_flight -= 1
            self.slots.release()
            if self.in_flight == 0:
                self.idle.set()

    async def _serve(self, call: Call, raw, body: dict | None, rid: str) -> Reply | StreamOut:
        """Primaries (retries within both budgets) -> backups -> a busy replica's 429 -> cache -> 503.

        What counts against a replica (docs/gateway.md, "Whose fault"): a 4xx never; a busy answer never (the
        replica is asked no more for this request); no answer (refused, reset, timeout) always; a 5xx answer
        once per replica and request, and not at all when it is a poison request whose replicas served others
        meanwhile. A poison request is one answered 5xx by two different replicas in a row (or twice by one
        that served others in between): its 5xx goes back to its client instead of on across the pool."""
        s = self.settings
        t_start = time.monotonic()
        self.budget.request()
        tried: set[str] = set()
        shunned: set[str] = set()  # said busy: not asked again for this request
        charged: set[str] = set()  # counted against already, for this request
        busy: list[Failure] = []
        prev: Failure | None = None  # the previous attempt's 5xx answer, not yet counted

        def charge(f: Failure) -> None:
            if f.released:
                return  # the health checks took that replica out already; this request did nothing to it
            if f.upstream.name not in charged:
                charged.add(f.upstream.name)
                f.upstream.record(False)

        last: Failure | None = None
        budget_spent = False
        for n in range(1 + s.retries):
            u = self.primary.pick(tried | shunned) or self.primary.pick(shunned)
            if u is None:
                break
            if n:
                if not self.budget.spend():
                    self.metrics.retries_denied.inc()
                    budget_spent = True
                    break
                # An upstream's Retry-After binds only a retry to that same upstream.
                honour = last.retry_after if last is not None and last.upstream is u else None
                await asyncio.sleep(self._backoff(n, honour))
                u = self.primary.pick(tried | shunned) or self.primary.pick(shunned)
                if u is None:
                    break
                self.metrics.retries.inc()
            tried.add(u.name)
            out = await attempt(self, call, u, raw, body, rid, None, n + 1)
            if not isinstance(out, Failure):
                if prev is not None:
                    charge(prev)  # the request was fine: that 5xx was the replica's
                return out
            if out.kind == ANSWER and prev is not None:
                # Served others while this request was being tried: they work, this request does not.
                exonerated = prev.upstream.last_ok_at >= t_start or out.upstream.last_ok_at >= t_start
                if prev.upstream is out.upstream and not exonerated:
                    charge(prev)  # one replica failing twice, nothing else to go on: an ordinary failure
                    prev = out
                    last = out
                    continue
                if not exonerated:
                    charge(prev)  # nobody served anything meanwhile: it may be the pool; one count, not two
                self.metrics.passed_up.labels("poison").inc()
                return self._pass_up(out, rid, n + 1, {"x-gateway-poison": "true"})
            if prev is not None:
                charge(prev)
                prev = None
            if out.kind == ANSWER:
                prev = out
            elif out.kind == BUSY:
                busy.append(out)
                shunned.add(u.name)
            else:
                charge(out)
            last = out
        if prev is not None:
            charge(prev)
        # Every primary failed, is busy, or may not be retried: the fallback chain.
        tried_backup: set[str] = set()
        while (u := self.backup.pick(tried_backup)) is not None:
            tried_backup.add(u.name)
            out = await attempt(self, call, u, raw, body, rid, "backup", len(tried) + len(tried_backup))
            if not isinstance(out, Failure):
                self.metrics.fallbacks.labels("backup").inc()
                return out
            if out.kind == BUSY:
                busy.append(out)
            else:
                charge(out)
        if busy:
            # Busy is not down: the replicas work and said when to come back; the soonest of them is the answer.
            self.metrics.passed_up.labels("busy").inc()
            soonest = min(busy, key=lambda f: f.retry_after if f.retry_after is not None else math.inf)
            wait = soonest.retry_after if soonest.retry_after is not None else s.retry_after_s
            return self._pass_up(soonest, rid, len(tried) + len(tried_backup), retry_after_headers(wait))
        if body is not None:
            answer = self.cache.get(cache_key(call.path, body))
            if answer is not None:
                self.metrics.fallbacks.labels("cache").inc()
                return await self._from_cache(call, answer, body, rid)
        self.metrics.fallbacks.labels("unavailable").inc()
        if budget_spent:
            return self._refuse(503, f"an upstream failed and the retry budget is spent (retries are at most "
                                     f"{s.retry_budget_ratio:.0%} of requests over {s.retry_budget_window_s:g}s, "
                                     f"+{s.retry_budget_min}): too much is failing now; retry later",
                                "retry_budget_exhausted", rid)
        return self._refuse(503, "every upstream is failing and no cached answer fits; retry later",
                            "all_upstreams_unavailable", rid)

    def _pass_up(self, f: Failure, rid: str, attempts: int, extra: dict) -> Reply:
        return Reply(f.status, f.body, {
            "x-request-id": rid, "x-served-by": "backup" if f.upstream.pool == "backup" else f.upstream.name,
            "x-upstream": f.upstream.name, "x-gateway-attempts": str(attempts), **extra}, f.content_type)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            return min(retry_after, s.retry_after_cap_s)
        base = min(s.backoff_max_s, s.backoff_base_s * 2 ** (attempt - 1))
        return base * (0.5 + self.rng.random() * 0.5)  # jitter: between half and all of it

    def remember(self, path, body, answer) -> None:
        """Keep an answer for the cache fallback. answer: its (text, finish_reason, usage, model), or a function
        that parses them out, called only if the fallback ever serves it: parsing every streamed answer as it
        ended cost the gateway a JSON parse per event of every request."""
        if body is None or answer is None:
            return
        self.cache.put(cache_key(path, body), Answer.of(answer, body.get("model", ""), time.monotonic()))

    async def _from_cache(self, call: Call, answer: Answer, body, rid) -> Reply | StreamOut:
        stream = bool(body.get("stream"))
        kind = "chat" if call.path.endswith("chat/completions") else "completion"
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        built = synthesize(kind, rid, answer.model, answer.text, answer.finish_reason, answer.usage, stream,
                           include_usage, "cache")
        headers = {"x-request-id": rid, "x-served-by": "cache", "x-gateway-attempts": "0"}
        if not stream:
            return Reply.json(built, 200, headers)
        out = call.stream(200, {**headers, "Content-Type": "text/event-stream"})
        await out.write_eof(built)
        return out
