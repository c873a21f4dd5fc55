"""The gateway's small parts on their own: breaker, auto timeouts, cache keys, SSE watching, the retry budget,
ejection's cap, health verdicts, what an error status says."""

import asyncio
import json
import time

import pytest

from chaos.reference.gateway.attempt import ANSWER, BUSY, classify
from chaos.reference.gateway.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from chaos.reference.gateway.budget import RetryBudget
from chaos.reference.gateway.cache import Answer, AnswerCache, cache_key
from chaos.reference.gateway.settings import GatewaySettings
from chaos.reference.gateway.stream import SSECollector, synthesize
from chaos.reference.gateway.upstreams import (
    FirstByteDeadline,
    LatencyTracker,
    Pool,
    Upstream,
    health_loop,
)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_breaker_cycle_with_a_clock():
    clock = Clock()
    b = CircuitBreaker(window=4, min_requests=3, error_rate=0.5, open_s=2.0, clock=clock)
    for ok in (True, False, False):
        assert b.can_pass()
        b.begin()
        b.record(ok)
    assert b.state == OPEN and not b.can_pass()
    clock.t = 2.5
    assert b.can_pass()
    b.begin()
    assert b.state == HALF_OPEN and not b.can_pass()  # one probe at a time
    b.record(False)
    assert b.state == OPEN
    clock.t = 5.0
    b.begin()
    b.record(True)
    assert b.state == CLOSED and [s for _, s in b.transitions] == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


def test_an_abandoned_probe_does_not_wedge_the_breaker():
    clock = Clock()
    b = CircuitBreaker(window=2, min_requests=2, error_rate=0.5, open_s=1.0, clock=clock)
    b.record(False)
    b.record(False)
    clock.t = 1.5
    assert b.begin() is True and not b.can_pass()
    b.abandon_probe()  # the client of the probe went away
    assert b.can_pass() and b.begin() is True
    b.record(True)
    assert b.state == CLOSED


def test_auto_timeout_is_one_and_a_half_p99_with_floor_and_default():
    t = LatencyTracker()
    assert t.timeout("first_token", "auto", floor=2.0, default=10.0) == 10.0  # no samples yet
    assert t.timeout("first_token", 7.0, floor=2.0, default=10.0) == 7.0  # a number is taken as given
    for v in [0.1] * 99 + [4.0]:
        t.add("first_token", v)
    assert t.timeout("first_token", "auto", floor=2.0, default=10.0) == 6.0  # 1.5 x P99
    assert t.timeout("total", "auto", floor=2.0, default=10.0) == 10.0  # each kind its own samples
    t.ttft.clear()
    for _ in range(LatencyTracker.EVERY - 1):  # computed again only once EVERY samples came (not per request)
        t.add("first_token", 0.1)
    assert t.timeout("first_token", "auto", floor=2.0, default=10.0) == 6.0
    t.add("first_token", 0.1)
    assert t.timeout("first_token", "auto", floor=2.0, default=10.0) == 2.0  # the floor


def test_cache_key_ignores_order_stream_and_user_and_the_cache_is_bounded():
    a = cache_key("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                           "stream": True, "user": "u1"})
    b = cache_key("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "model": "m"})
    assert a == b and a != cache_key("/v1/completions", {"model": "m", "prompt": "hi"})
    clock = Clock()
    c = AnswerCache(size=2, ttl_s=10, clock=clock)
    for k in "xyz":
        c.put(k, Answer(k, "stop", {}, "m", clock()))
    assert c.get("x") is None and c.get("z").text == "z"
    clock.t = 11
    assert c.get("z") is None


def test_sse_collector_sees_done_across_pieces_and_rebuilds_the_answer():
    chunks = [b'data: {"model":"m","choices":[{"delta":{"content":"Hel"}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\ndata: [DO', b'NE]\n\n']
    c = SSECollector()
    for piece in chunks:
        c.feed(piece)
    assert c.done and not c.error
    assert c.answer() == ("Hello", "stop", {}, "m")
    built = synthesize("chat", "r1", "m", "Hello", "stop", {"completion_tokens": 2}, True, True, "cache")
    lines = [line[6:] for line in built.decode().split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]" and json.loads(lines[-2])["usage"] == {"completion_tokens": 2}


def test_retry_budget_allows_a_fraction_of_the_windows_requests_plus_a_floor():
    clock = Clock()
    b = RetryBudget(ratio=0.2, window_s=10, minimum=1, clock=clock)
    assert b.spend() and not b.spend()  # the floor: one retry with no traffic at all
    for _ in range(10):
        b.request()
    assert b.spend() and b.spend() and not b.spend()  # 1 + 0.2 x 10 = 3 in the window
    clock.t = 9.9
    assert not b.spend()  # still inside the window
    clock.t = 10.5
    assert b.spend() and not b.spend()  # the window moved past them: only the floor again


def test_ejection_never_takes_more_than_its_share_of_a_pool():
    s = GatewaySettings(eject_after_failures=2, max_ejection_percent=50)
    pool = Pool("primary", [Upstream(f"r{i}", f"http://127.0.0.1:{i + 1}", s, "primary") for i in range(3)])
    for u in pool.upstreams:
        for _ in range(2):
            u.record(False)
    now = time.monotonic()
    assert [u.state(now) for u in pool.upstreams].count("ejected") == 1  # 50 % of 3, rounded down
    single = Pool("primary", [Upstream("only", "http://127.0.0.1:1", s, "primary")])
    for _ in range(5):
        single.upstreams[0].record(False)
    assert single.upstreams[0].ejected_until < time.monotonic()  # never the last one (its breaker still can)


def test_a_timed_out_health_check_needs_a_second_but_a_refusal_does_not():
    u = Upstream("r0", "http://127.0.0.1:1", GatewaySettings(unhealthy_after_checks=2), "primary")
    u.checked(False, timed_out=True)
    assert u.healthy
    u.checked(True)
    u.checked(False, timed_out=True)
    assert u.healthy
    u.checked(False, timed_out=True)
    assert not u.healthy
    u.checked(True)
    assert u.healthy
    u.checked(False)  # refused, or an answer other than 200
    assert not u.healthy


def test_what_an_error_status_says():
    assert classify(400, {}, b"") is None and classify(413, {}, b"") is None  # the client's: passed through
    assert classify(429, {}, b'{"error": {"code": "rate_limit_exceeded"}}') == BUSY
    assert classify(429, {}, b'{"error": {"code": "insufficient_quota"}}') is None  # no replica will say otherwise
    assert classify(503, {"retry-after": "2"}, b"") == BUSY  # full or draining: works, come back later
    assert classify(503, {}, b"") == ANSWER and classify(500, {}, b"") == ANSWER


def test_every_route_the_gateway_serves_is_in_its_openapi_document():
    from chaos.reference.gateway.app import ROUTES, Gateway
    from chaos.reference.openapi import gateway_spec

    paths = gateway_spec()["paths"]
    served = {(p, m.lower()) for p, methods in ROUTES.items() for m in methods}
    assert all(callable(getattr(Gateway, name)) for methods in ROUTES.values() for name in methods.values())
    documented = {(p, m) for p, item in paths.items() for m in item}
    assert served == documented, served ^ documented


def test_an_expired_first_byte_deadline_is_left_alone_when_its_replica_is_released():
    """Its timer fired but the attempt has not left __aexit__ yet (still in waiting): moving that Timeout
    raised RuntimeError, through the health check and out of the health loop."""
    u = Upstream("r0", "http://127.0.0.1:1", GatewaySettings(unhealthy_after_checks=2), "primary")

    async def waiting_attempt():
        async with FirstByteDeadline(u, 0.01) as deadline:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:  # the timer fired: on the way out, still waiting
                assert deadline in u.waiting
                u.checked(False, timed_out=True)
                u.checked(False, timed_out=True)  # unhealthy now: the waiting are released
                raise
        return deadline

    with pytest.raises(TimeoutError):
        asyncio.run(waiting_attempt())
    assert not u.healthy and not u.waiting


def test_the_health_loop_outlives_an_error_in_a_check():
    class Flaky(Upstream):
        calls = 0

        def checked(self, ok, timed_out=False):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("a bug in a verdict")
            super().checked(ok, timed_out)

    s = GatewaySettings(health_interval_s=0.01)
    u = Flaky("r0", "http://127.0.0.1:1", s, "primary")  # port 1: refused, a verdict each round

    async def run():
        task = asyncio.create_task(health_loop([Pool("primary", [u])], s))
        deadline = time.monotonic() + 20
        while Flaky.calls < 3 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not task.done(), task.exception()
        task.cancel()

    asyncio.run(run())
    assert Flaky.calls >= 3 and not u.healthy


@pytest.mark.parametrize("bad", [
    {"retries": 1.5}, {"retries": True}, {"retries": 6}, {"breaker_window": 0}, {"breaker_min_requests": -3},
    {"breaker_window": 10**400}, {"max_concurrency": "8"}, {"cache_size": 2.0}, {"max_body_mb": 0.5},
    {"health_interval_s": 10**400}, {"first_token_timeout": 10**400}, {"total_timeout": float("inf")},
    {"eject_for_s": float("nan")}, {"retry_after_cap_s": -1}, {"breaker_error_rate": 0},
    {"max_ejection_percent": 10**400}, {"retry_budget_ratio": "0.2"}, {"seed": 1.5},
    {"stream_idle_timeout_s": 0}, {"stream_idle_timeout_s": -1}, {"stream_idle_timeout_s": 10**400},
    {"stream_idle_timeout_s": "2s"}, {"stream_idle_timeout_s": 3601},
])
def test_settings_refuse_wrong_types_and_ranges_with_valueerror(bad):
    with pytest.raises(ValueError):  # never TypeError or OverflowError: the CLI reports ValueError plainly
        GatewaySettings.from_dict(bad)


def test_settings_take_whole_numbers_and_numbers_in_range():
    s = GatewaySettings.from_dict({"retries": 0, "breaker_min_requests": 100, "first_token_timeout": 60,
                                   "retry_after_cap_s": 0, "health_interval_s": 1, "seed": 10**30,
                                   "stream_idle_timeout_s": 2})
    assert s.breaker_min_requests == 100 and s.max_body_bytes == 32 * 2**20
    assert s.stream_idle_timeout_s == 2 and GatewaySettings().stream_idle_timeout_s is None  # off unless asked


def test_a_streamed_answer_is_parsed_only_when_the_cache_serves_it():
    events = [{"model": "m1", "choices": [{"delta": {"content": "he"}}]},
              {"choices": [{"delta": {"content": "llo"}, "finish_reason": "length"}], "usage": {"total_tokens": 3}}]
    col = SSECollector()
    col.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n")
    calls = []
    deferred = col.deferred_answer()
    assert callable(deferred)
    clock = Clock()
    c = AnswerCache(size=4, ttl_s=10, clock=clock)
    c.put("k", Answer.of(lambda: calls.append(1) or deferred(), "asked", clock()))
    assert calls == []  # nothing parsed while it sits in the cache
    a = c.get("k")
    assert (a.text, a.finish_reason, a.usage, a.model) == ("hello", "length", {"total_tokens": 3}, "m1")
    assert c.get("k") is a and calls == [1]  # parsed once
    c.put("bad", Answer.of(lambda: None, "asked", clock()))
    assert c.get("bad") is None and len(c) == 1  # no answer after all: a miss, and gone
    big = SSECollector()
    big.feed(b"data: " + json.dumps({"choices": [{"delta": {"content": "x" * 20000}}]}).encode() + b"\n\n")
    assert big.deferred_answer()[0] == "x" * 20000  # a long stream is parsed at once: the cache keeps text
