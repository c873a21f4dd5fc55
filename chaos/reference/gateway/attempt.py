"""One attempt at one upstream: the answer passed through (a stream token by token), or a Failure that says
what kind of no it was, so the chain in app.py can decide what it means and whom it counts against.

A stream is committed when the upstream's first data arrives; from then on nothing is retried, and an
upstream failure becomes an error event and [DONE] for that one client.
"""

from __future__ import annotations

import asyncio
import json
import time

from ...common import parse_retry_after
from ...http1.wire import HTTPError, body_framing, encode_head, read_body
from ...http1.pump import Pump, StreamIdle, to_client
from .call import Call, Reply
from .errors import error_body
from .stream import SSECollector, answer_from_json
from .upstreams import FirstByteDeadline, Upstream

BUSY, ANSWER, BROKEN = "busy", "answer", "broken"
RETRY_LATER = {408, 409, 429}  # a working replica asking to be asked again later, or elsewhere
ERROR_LIMIT = 1 << 20  # an error answer is read whole (to classify it and pass it up), up to this
ANSWER_LIMIT = 256 << 20  # a plain (not streamed) answer is read whole, up to this
_BROKEN = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, HTTPError)


class Failure:
    """An attempt that failed before anything reached the client: safe to retry elsewhere.

    kind: BUSY (429/408/409, or 503 with Retry-After: the replica works and is full or leaving), ANSWER (any
    other 5xx: the replica answered that it failed this request), BROKEN (no answer: refused, reset, timed out,
    an empty stream). status, body and content_type are the upstream's, for passing it up. released: let go
    by the health checks (Upstream.abandon_waiting), which took the replica out already: charged to nobody."""

    __slots__ = ("body", "content_type", "kind", "reason", "released", "retry_after", "status", "upstream")

    def __init__(self, kind: str, upstream: Upstream, reason: str, status: int | None = None, body: bytes = b"",
                 content_type: str = "application/json", retry_after: float | None = None,
                 released: bool = False):
        self.kind, self.upstream, self.reason, self.status = kind, upstream, reason, status
        self.body, self.content_type, self.retry_after = body, content_type, retry_after
        self.released = released


def classify(status: int, headers, body: bytes) -> str | None:
    """What an error status says; None when it is the client's own error (passed through, counts for nothing)."""
    if status < 500 and status not in RETRY_LATER:
        return None
    if status == 429 and b"insufficient_quota" in body:
        return None  # a quota, not a queue: no replica will say otherwise (OpenAI's rule)
    if status in RETRY_LATER or (status == 503 and parse_retry_after(headers) is not None):
        return BUSY
    return ANSWER


async def attempt(gw, call: Call, u: Upstream, raw, body: dict | None, rid: str,
                  served_as: str | None, attempts: int):
    s = gw.settings
    path = call.path
    first_timeout = gw.latency.timeout("first_token", s.first_token_timeout, s.auto_floor_s, s.auto_default_s)
    total_timeout = gw.latency.timeout("total", s.total_timeout, s.auto_floor_s, 12 * s.auto_default_s)
    body_s = len(raw) / 2**20 * s.auto_body_s_per_mb if raw else 0.0
    first_timeout += body_s if s.first_token_timeout == "auto" else 0.0
    total_timeout += body_s if s.total_timeout == "auto" else 0.0
    target = u.conns.upstream
    headers = [("Host", target.host_header), ("Content-Type", "application/json"), ("Content-Length", str(len(raw))),
               ("x-request-id", rid)]
    if (auth := call.head.get("authorization")) is not None:
        headers.append(("Authorization", auth))
    message = encode_head(f"POST {target.base}{path} HTTP/1.1", headers) + raw
    probing = u.breaker.begin()
    u.outstanding += 1
    t0 = time.monotonic()
    conn = None  # (reader, writer) while this attempt holds an upstream connection
    reusable = False
    committed = None
    loop = asyncio.get_running_loop()
    deadline = None
    try:
        try:
            # asyncio.timeout rather than wait_for: no extra task per await on the hot path. The upstream's
            # health check may bring the deadline forward (Upstream.abandon_waiting).
            async with FirstByteDeadline(u, first_timeout) as deadline:
                conn, resp = await u.conns.send(message)
                status = int(resp.first[1])
                framing = body_framing(resp, False, "POST")
                keep = resp.keeps_alive(False, framing)
                ctype = resp.get("content-type") or "application/json"
                served = served_as or resp.get("x-served-by") or u.name
                out_headers = {"x-request-id": rid, "x-served-by": served, "x-gateway-attempts": str(attempts),
                               "x-upstream": u.name}
                if status >= 400:
                    data = await read_body(conn[0], framing, ERROR_LIMIT)
                    reusable = keep
                    kind = classify(status, resp, data)
                    if kind is None:  # the client's mistake: pass it through, never retry it, blame nobody
                        return Reply(status, data, out_headers, ctype)
                    return Failure(kind, u, f"HTTP {status}", status, data, ctype, parse_retry_after(resp))
                # The answer's own type says whether it streams: the request's flag may not have been parsed.
                stream = ctype.startswith("text/event-stream")
                if stream:
                    pump = Pump(*conn, framing)
                    first, ended = await pump.first()
            if not stream:
                async with asyncio.timeout_at(loop.time() + max(0.001, total_timeout - (time.monotonic() - t0))):
                    data = await read_body(conn[0], framing, ANSWER_LIMIT)
                reusable = keep
                u.record(True)
                gw.latency.add("total", time.monotonic() - t0)
                if body is not None and s.cache_size:
                    gw.remember(path, body, answer_from_json(data))
                gw.metrics.served.labels(served_as or u.pool).inc()
                return Reply(status, data, out_headers, ctype)
            if not first:
                return Failure(BROKEN, u, "the stream ended before any data")
        except TimeoutError:
            # Released only when the brought-forward deadline is what fired: an answer may have beaten it in
            # the same loop turn, and this be the total timeout afterwards.
            if deadline is not None and deadline.abandoned and deadline.timeout.expired():
                return Failure(BROKEN, u, "stopped answering: marked unhealthy while this request waited",
                               released=True)
            return Failure(BROKEN, u, f"no first byte within {first_timeout:.1f}s")
        except _BROKEN as e:
            return Failure(BROKEN, u, _why(e))
        # Commit: from here on nothing is retried.
        gw.latency.add("first_token", time.monotonic() - t0)
        committed = call.stream(200, {**out_headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        collector = SSECollector(keep=s.cache_size > 0 and body is not None)
        upstream_failed = await _relay_stream(u, pump, first, ended, committed, collector, total_timeout, t0,
                                              s.stream_idle_timeout_s)
        if upstream_failed is None:
            reusable = keep
        if upstream_failed is None and not collector.done:
            upstream_failed = f"upstream {u.name} ended the stream without [DONE]"
        if upstream_failed:
            u.record(False)
            gw.metrics.midstream_failures.inc()
            err = error_body(upstream_failed, "upstream_failed")
            await committed.write_eof(b"data: " + json.dumps(err).encode() + b"\n\ndata: [DONE]\n\n")
        else:
            u.record(not collector.error)
            gw.latency.add("total", time.monotonic() - t0)
            if not collector.error:
                gw.remember(path, body, collector.deferred_answer())
        gw.metrics.served.labels(served_as or u.pool).inc()
        return committed
    except ConnectionResetError:
        return committed  # the client left: the finally closes the upstream connection, which aborts it there too
    finally:
        u.outstanding -= 1
        if probing and u.breaker.probe_in_flight:
            u.breaker.abandon_probe()  # no verdict (cancelled, client gone, a 4xx): never leave it half-open
        if conn is not None:
            if reusable:
                u.conns.put(*conn)
            else:
                conn[1].close()


async def _relay_stream(u: Upstream, pump: Pump, first: bytes, ended: bool, committed, collector: SSECollector,
                        total_timeout: float, t0: float, idle_s: float | None) -> str | None:
    """Pass the stream on as each read brings it, a batch per write (the last with the end of the body), from
    the pump's read callback; None when it ended whole, else what went wrong upstream (the client's side
    raising ConnectionResetError is the caller's)."""

    def write(data: bytes, last: bool) -> None:
        collector.feed(data)
        if last and collector.done:
            committed.push(data, True)
        elif data:
            committed.push(data)  # as it came: token by token

    sink = to_client(write, committed.writer)  # full: read no more upstream until it drains
    loop = asyncio.get_running_loop()
    failed = None
    try:
        async with asyncio.timeout_at(loop.time() + max(0.001, total_timeout - (time.monotonic() - t0))):
            full = sink(first, ended)
            if not ended:
                if full:
                    await committed.writer.drain()
                pump.attach(sink, idle_s)
                failed = await pump.run(committed.writer.drain)
            await committed.writer.drain()
    except TimeoutError:
        return f"upstream {u.name} passed the total timeout ({total_timeout:.1f}s) mid-stream"
    if isinstance(failed, StreamIdle):
        return f"upstream {u.name} sent nothing for {idle_s:g}s mid-stream"
    if failed is not None:
        return f"upstream {u.name} failed mid-stream: {_why(failed)}"
    return None


def _why(e: BaseException) -> str:
    if isinstance(e, asyncio.IncompleteReadError):
        return "the connection closed mid-answer"
    if isinstance(e, HTTPError):
        return f"a malformed answer ({e})"
    return type(e).__name__
