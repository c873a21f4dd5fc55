"""The gateway with real replicas (and a scripted one) over loopback."""

import itertools
import json
import signal
import time

import pytest

from chaos.reference.launcher import start_gateway
from tests.load.scripted_server import ScriptedServer

from ..http_util import metric, open_stream, post, read_rest, request, sse
from .stub import Stub
from .util import BODY, fault, gateway_args, replicas, settings, stop, unfault

pytestmark = pytest.mark.slow  # each test starts replicas and a gateway of its own (5-9 s each)


def test_sigkill_mid_stream_fails_that_stream_only_and_is_not_retried():
    rs = replicas(2)
    for r in rs:
        fault(r, {"step_delay_ms": 30})
    gw = start_gateway(rs, args=settings())
    try:
        c, resp = open_stream(gw.base_url, {**BODY, "max_tokens": 200})
        served = resp.getheader("x-served-by")
        assert resp.getheader("x-gateway-attempts") == "1"
        resp.readline()  # the first chunk is through: the stream is committed
        victim = next(r for r in rs if r.output[-1].split()[3] == served)
        victim.signal(signal.SIGKILL)
        events = read_rest(resp)
        c.close()
        assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == "upstream_failed"
        assert metric(gw.base_url, "gateway:retries_total") == 0  # bytes had gone out: never retried
        other = next(r for r in rs if r is not victim).output[-1].split()[3]
        for _ in range(4):
            status, headers, _ = post(gw.base_url, "/v1/completions", BODY)
            assert status == 200 and headers["x-served-by"] == other
    finally:
        stop(gw, *rs)


def test_failed_attempts_are_retried_elsewhere_before_streaming():
    rs = replicas(2)
    fault(rs[0], {"fail_fraction": 1.0})
    gw = start_gateway(rs, args=settings(eject_after_failures=100))
    try:
        for _ in range(4):
            status, headers, body = sse(gw.base_url, "/v1/completions", {**BODY, "stream": True})
            assert status == 200 and headers["x-served-by"] == "r1" and body[-1] == "[DONE]"
        assert metric(gw.base_url, "gateway:retries_total") >= 1
    finally:
        stop(gw, *rs)


def test_backoff_grows_and_retry_after_is_honoured():
    # A 5xx with Retry-After binds the retry to that same upstream: it waits what the upstream said.
    with Stub(status=500, retry_after_ms=600) as s500:
        gw = start_gateway([], args=["--upstream", f"p0={s500.url}", *settings(eject_after_failures=100,
                                                                                breaker_min_requests=100)])
        try:
            t0 = time.monotonic()
            status, headers, body = post(gw.base_url, "/v1/completions", BODY)
            took = time.monotonic() - t0
        finally:
            gw.stop()
        assert status == 503 and body["error"]["code"] == "all_upstreams_unavailable" and "retry-after" in headers
        assert s500.stats()["requests"] == 3  # one try and at most 2 retries
        assert 2 * 0.59 <= took < 5  # two waits of the upstream's Retry-After, not the 50 ms backoff
    # A busy upstream (429) is not retried on itself: its answer goes to the client, who waits.
    with ScriptedServer("http429", retry_after_ms=600) as s429:
        gw = start_gateway([], args=["--upstream", f"p0={s429.url}", *settings()])
        try:
            status, headers, body = post(gw.base_url, "/v1/completions", BODY)
        finally:
            gw.stop()
        assert status == 429 and len(s429.arrivals) == 1
        assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "600"
    rs = replicas(1)
    fault(rs[0], {"fail_fraction": 1.0})
    gw = start_gateway(rs, args=settings(eject_after_failures=100, breaker_min_requests=100, backoff_base_s=0.2))
    try:
        t0 = time.monotonic()
        status, _, _ = post(gw.base_url, "/v1/completions", BODY)
        took = time.monotonic() - t0
        assert status == 503
        assert took >= 0.1 + 0.2  # jittered backoff: at least half of 0.2 s, then half of 0.4 s
        assert took < 3
    finally:
        stop(gw, *rs)


def test_breaker_opens_probes_and_closes():
    rs = replicas(2)
    fault(rs[0], {"fail_fraction": 1.0})
    gw = start_gateway(rs, args=settings(eject_after_failures=100, breaker_min_requests=3, breaker_window=4,
                                         breaker_error_rate=0.5, breaker_open_s=1.0))

    def breaker():
        return request(gw.base_url, "GET", "/gateway/state")[2]["primary"]["r0"]["breaker"]

    try:
        for _ in range(8):
            assert post(gw.base_url, "/v1/completions", BODY)[0] == 200  # retried onto r1
        assert breaker() == "open"
        unfault(rs[0])
        time.sleep(1.1)
        seen = set()
        for _ in range(10):
            _, headers, _ = post(gw.base_url, "/v1/completions", BODY)
            seen.add(headers["x-served-by"])
        assert breaker() == "closed" and "r0" in seen  # the half-open probe succeeded; r0 serves again
    finally:
        stop(gw, *rs)


def test_fallback_order_backup_then_cache_then_503():
    rs = replicas(2)
    (b0,) = replicas(1, prefix="b")
    gw = start_gateway(rs, [b0], args=settings())
    try:
        assert post(gw.base_url, "/v1/completions", BODY)[1]["x-served-by"] in ("r0", "r1")
        stop(*rs)
        status, headers, _ = post(gw.base_url, "/v1/completions", BODY)
        assert status == 200 and headers["x-served-by"] == "backup"
        b0.stop()
        status, headers, cached = post(gw.base_url, "/v1/completions", BODY)
        assert status == 200 and headers["x-served-by"] == "cache" and cached["system_fingerprint"] == "cache"
        status, headers, events = sse(gw.base_url, "/v1/completions", {**BODY, "stream": True,
                                                                      "stream_options": {"include_usage": True}})
        assert headers["x-served-by"] == "cache" and events[-1] == "[DONE]"
        assert "".join(e["choices"][0]["text"] for e in events[:-2] if e["choices"]) == cached["choices"][0]["text"]
        status, headers, body = post(gw.base_url, "/v1/completions", {**BODY, "prompt": "never asked"})
        assert status == 503 and headers["retry-after"] == "1" and body["error"]["code"] == "all_upstreams_unavailable"
        text = request(gw.base_url, "GET", "/metrics")[2]
        for path, n in (("backup", 1), ("cache", 2), ("unavailable", 1)):
            assert f'gateway:fallbacks_total{{path="{path}"}} {n}.0' in text
    finally:
        stop(gw, *rs, b0)


def test_a_frozen_backup_does_not_hold_requests_for_the_whole_first_token_timeout():
    """A SIGSTOPped backup accepts connections and answers nothing. Its waiting attempts are released when its
    timed-out health checks mark it unhealthy (two in a row), so a repeated question is answered from the cache
    in a few seconds, not after the first-token timeout ("auto" is 1.5 x P99: many seconds on a busy box,
    longer than a short pause and longer than clients wait, so under contention the cache never answered)."""
    (r0,) = replicas(1)
    (b0,) = replicas(1, prefix="b")
    gw = start_gateway([r0], [b0], args=settings(first_token_timeout=60))
    try:
        assert post(gw.base_url, "/v1/completions", BODY)[1]["x-served-by"] == "r0"
        r0.stop()
        assert post(gw.base_url, "/v1/completions", BODY)[1]["x-served-by"] == "backup"
        b0.signal(signal.SIGSTOP)
        t0 = time.monotonic()
        status, headers, _ = post(gw.base_url, "/v1/completions", BODY, timeout=90)
        took = time.monotonic() - t0
        assert status == 200 and headers["x-served-by"] == "cache"
        assert took < 30, f"the frozen backup held the request {took:.1f}s (first-token timeout 60s)"
    finally:
        b0.signal(signal.SIGCONT)
        stop(gw, r0, b0)


def test_admission_control_refuses_with_429():
    rs = replicas(1)
    fault(rs[0], {"step_delay_ms": 50})
    gw = start_gateway(rs, args=["--max-concurrency", "1", "--max-queue", "0", *settings()])
    try:
        c, resp = open_stream(gw.base_url, {**BODY, "max_tokens": 60})
        resp.readline()
        status, headers, body = post(gw.base_url, "/v1/completions", BODY)
        assert status == 429 and headers["retry-after"] == "1" and body["error"]["code"] == "rate_limit_exceeded"
        read_rest(resp)
        c.close()
        assert post(gw.base_url, "/v1/completions", BODY)[0] == 200
    finally:
        stop(gw, *rs)


def test_streaming_passes_through_token_by_token():
    rs = replicas(1)
    fault(rs[0], {"step_delay_ms": 40})
    gw = start_gateway(rs, args=settings())
    try:
        def timings(base_url):
            t0 = time.monotonic()  # before the request: TTFT includes whatever the gateway holds back
            c, resp = open_stream(base_url, {**BODY, "max_tokens": 8})
            stamps = []
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"data: {"):
                    stamps.append(time.monotonic() - t0)
            c.close()
            return stamps

        direct = [timings(rs[0].base_url) for _ in range(5)]
        through = [timings(gw.base_url) for _ in range(5)]
        med = lambda xs: sorted(xs)[len(xs) // 2]
        assert abs(med([d[0] for d in through]) - med([d[0] for d in direct])) < 0.015
        gaps = [b - a for t in through for a, b in itertools.pairwise(t[:-1])]
        assert med(gaps) > 0.03  # chunks arrive spread out, as generated: nothing is buffered
    finally:
        stop(gw, *rs)


def test_a_client_that_stops_reading_holds_the_upstream_back_and_loses_nothing():
    # 2,000 events of 16 KB (~33 MB, more than the sockets' buffers on the way hold): while the client reads
    # nothing for 2 s, the gateway must stop reading the upstream (whose writes then wait) rather than hold the
    # stream in memory; then every event arrives, in order, and the stream ends whole.
    n = 2000
    with Stub(name="s0", stream_events=n, event_bytes=16384) as s0:
        gw = start_gateway([], args=gateway_args({"s0": s0.url}))
        try:
            c, resp = open_stream(gw.base_url, BODY)
            time.sleep(2.0)
            events = read_rest(resp)
            c.close()
            assert events[-1] == "[DONE]"
            assert [json.loads(e)["i"] for e in events[:-1]] == list(range(n))
            took = s0.stats()["stream_write_s"]
            assert len(took) == 1 and took[0] >= 1.0, took  # the upstream was held back while the client lagged
        finally:
            stop(gw)
