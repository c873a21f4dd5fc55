"""Whose fault is it: a client's 4xx, a busy replica's 429 and a poison request are not replica failures;
retries stay inside a budget; a health check that is merely slow does not take a replica out.

Real gateway processes over loopback, in front of real replicas or of stub upstream processes whose
misbehaviour is scripted (tests/reference/gateway/stub.py)."""

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from chaos.reference.launcher import start_gateway

from ..http_util import metric, post
from .stub import Stub
from .util import BODY, M, fault, gateway_args, settings, state, unfault

POISON = {"model": M, "prompt": "POISON: a body that makes every replica answer 500", "max_tokens": 4}


def normal(i):
    return {**BODY, "prompt": f"another client's question {i}"}  # distinct: the cache cannot answer it


def test_a_poison_request_goes_back_to_its_client_and_is_not_carried_across_the_pool():
    with Stub(name="s0", poison="POISON") as s0, Stub(name="s1", poison="POISON") as s1:
        gw = start_gateway([], args=gateway_args({"s0": s0.url, "s1": s1.url}))
        try:
            # The scenario from a fresh gateway: three times, with nobody else around.
            for _ in range(3):
                status, headers, body = post(gw.base_url, "/v1/completions", POISON)
                assert status == 500 and body["error"]["code"] == "internal_error", body  # the replica's own
                assert headers["x-gateway-attempts"] == "2" and headers["x-gateway-poison"] == "true"
            assert s0.stats()["poison"] + s1.stats()["poison"] == 6  # two replicas each time, not three tries
            states = {n: u["state"] for n, u in state(gw)["primary"].items()}
            assert list(states.values()).count("up") >= 1, states  # never both ejected
            for i in range(6):
                status, headers, _ = post(gw.base_url, "/v1/completions", normal(i))
                assert status == 200 and headers["x-served-by"] in ("s0", "s1")  # a primary, not the cache
        finally:
            gw.stop()
        # With other clients served meanwhile (a fresh gateway), the replicas plainly work: poison is counted
        # against nobody (or once, when nothing else was served while it was tried), and no breaker moves.
        gw = start_gateway([], args=gateway_args({"s0": s0.url, "s1": s1.url}))
        try:
            stop_traffic = threading.Event()
            served = []

            def others():
                i = 100
                while not stop_traffic.is_set() and i < 2000:
                    status, headers, _ = post(gw.base_url, "/v1/completions", normal(i))
                    served.append((status, headers.get("x-served-by")))
                    i += 1

            t = threading.Thread(target=others)
            t.start()
            try:
                deadline = time.monotonic() + 10
                while len(served) < 4 and time.monotonic() < deadline:
                    time.sleep(0.02)  # the others are being served before the poison comes
                for _ in range(5):
                    status, headers, _ = post(gw.base_url, "/v1/completions", POISON)
                    assert status == 500 and headers["x-gateway-attempts"] == "2"
            finally:
                stop_traffic.set()
                t.join(30)
            assert served and all(s == 200 and by in ("s0", "s1") for s, by in served), served[:5]
            st = state(gw)["primary"]
            assert all(u["breaker"] == "closed" and u["state"] == "up" for u in st.values()), st
            assert metric(gw.base_url, "gateway:passed_up_total") == 5
        finally:
            gw.stop()


def test_retries_stay_within_the_windows_budget():
    with Stub(name="bad", status=500) as bad, Stub(name="good") as good:
        # Ejection and the breaker kept out of it: every request meets "bad" first and would need a retry.
        gw = start_gateway([], args=gateway_args({"bad": bad.url, "good": good.url}, retry_budget_ratio=0.2,
                                                 retry_budget_min=0, eject_after_failures=100,
                                                 breaker_min_requests=100))
        try:
            got = [post(gw.base_url, "/v1/completions", normal(i)) for i in range(20)]
            statuses = [s for s, _, _ in got]
            retries = metric(gw.base_url, "gateway:retries_total")
            assert 1 <= retries <= 0.2 * 20, (retries, statuses)
            assert statuses.count(200) == retries  # each allowed retry served the request on "good"
            refused = [b for s, _, b in got if s != 200]
            assert all(b["error"]["code"] == "retry_budget_exhausted" for b in refused), refused[:2]
            assert bad.stats()["requests"] == 20  # never a second try on it either
        finally:
            gw.stop()


def test_client_errors_pass_through_and_do_not_dilute_a_failing_replicas_breaker(pair):
    r0, _ = pair
    fault(r0, {"fail_fraction": 1.0})  # r0 fails every valid request; a bad one gets its 400 before that
    gw = start_gateway(pair, args=settings(eject_after_failures=100, breaker_min_requests=4, breaker_window=8,
                                           breaker_error_rate=0.5, breaker_open_s=30))
    try:
        for i in range(8):
            status, headers, body = post(gw.base_url, "/v1/completions", {**normal(i), "temperature": 5})
            assert status == 400 and body["error"]["param"] == "temperature"  # the replica's own answer
            assert headers["x-gateway-attempts"] == "1"  # never retried
            assert post(gw.base_url, "/v1/completions", normal(i))[0] == 200
        assert state(gw)["primary"]["r0"]["breaker"] == "open"  # its 400s did not count as successes
        assert state(gw)["primary"]["r1"]["breaker"] == "closed"
    finally:
        gw.stop()
        unfault(r0)


def test_busy_replicas_answer_429_with_their_retry_after_not_503(pair):
    for r in pair:
        fault(r, {"step_delay_ms": 40})
    gw = start_gateway(pair, args=settings())
    try:
        with ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda i: post(gw.base_url, "/v1/completions", {**normal(i), "max_tokens": 12},
                                             timeout=60), range(16)))
        statuses = sorted(s for s, _, _ in got)
        assert set(statuses) <= {200, 429} and 200 in statuses, statuses  # no 503
        busy = [(h, b) for s, h, b in got if s == 429]
        if not busy:
            pytest.skip("cannot judge: the burst never saturated the replicas (the box is slow to send it)")
        for h, b in busy:
            assert h["retry-after"] == "3" and h["retry-after-ms"] == "2500", h  # 2.5 s, rounded up
            assert b["error"]["code"] == "rate_limit_exceeded"
        st = state(gw)["primary"]
        assert all(u["state"] == "up" and u["breaker"] == "closed" for u in st.values()), st
    finally:
        gw.stop()
        for r in pair:
            unfault(r)


@pytest.mark.slow
def test_a_slow_health_check_is_not_an_outage_but_a_dead_replica_is():
    # Every other /health of s0 answers after 1.5 s, past the 1 s health timeout.
    s0 = Stub(name="s0", health_slow_every=2, health_slow_s=1.5)
    gw = None
    try:
        gw = start_gateway([], args=gateway_args({"s0": s0.url}))
        seen = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            seen.add(state(gw)["primary"]["s0"]["state"])
            time.sleep(0.05)
        assert s0.stats()["health"] >= 3  # several checks, some of them slow
        assert seen == {"up"}, seen
        s0.stop()
        deadline = time.monotonic() + 10
        while state(gw)["primary"]["s0"]["state"] != "unhealthy" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state(gw)["primary"]["s0"]["state"] == "unhealthy"  # refused connections are believed at once
    finally:
        s0.stop()
        if gw is not None:
            gw.stop()


@pytest.mark.slow
def test_one_late_health_check_keeps_a_busy_replicas_requests_and_its_breaker():
    """The first-byte deadline covers queueing, prefill and a whole non-streamed generation: one late /health
    from a busy replica must not throw that work away (before: every waiting attempt was released at the first
    timed-out check, charged, and retried; six of them opened the breaker)."""
    # Every other /health answers after 3 s, past the 1.5 s health timeout; each generation takes 6 s, in
    # which at least one slow check times out (checked below, from the stub's side).
    with Stub(name="s0", generate_delay_s=6, health_slow_every=2, health_slow_s=3) as s0:
        gw = start_gateway([], args=gateway_args({"s0": s0.url}, first_token_timeout=60, health_timeout_s=1.5))
        try:
            with ThreadPoolExecutor(6) as ex:
                got = list(ex.map(lambda i: post(gw.base_url, "/v1/completions", normal(i), timeout=90), range(6)))
            st = state(gw)["primary"]["s0"]
        finally:
            gw.stop()
        stats = s0.stats()
    assert [s for s, _, _ in got] == [200] * 6, [(s, b) for s, _, b in got]
    assert all(h["x-gateway-attempts"] == "1" and h["x-served-by"] == "s0" for _, h, _ in got)
    assert stats["requests"] == 6  # none moved, none sent twice
    assert st["breaker"] == "closed" and st["state"] == "up", st
    # Not vacuous: three checks began during each generation, so two ended inside it, one of which timed out.
    assert len(stats["health_during"]) == 6 and min(stats["health_during"]) >= 3, stats["health_during"]


@pytest.mark.slow
def test_attempts_released_from_a_frozen_replica_are_not_counted_against_it():
    """Its timed-out checks took it out and let its waiting attempts go on down the chain; counting them too
    would open its breaker (six here, five needed) and keep it out after it thawed."""
    with Stub(name="s0", generate_delay_s=30) as s0, Stub(name="b0") as b0:
        gw = start_gateway([], args=[*gateway_args({"s0": s0.url}, first_token_timeout=60),
                                     "--backup", f"b0={b0.url}"])
        try:
            with ThreadPoolExecutor(6) as ex:
                futures = [ex.submit(post, gw.base_url, "/v1/completions", normal(i), timeout=90) for i in range(6)]
                deadline = time.monotonic() + 30
                while s0.stats()["requests"] < 6 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert s0.stats()["requests"] == 6
                os.kill(s0.proc.pid, signal.SIGSTOP)
                try:
                    got = [f.result() for f in futures]
                finally:
                    os.kill(s0.proc.pid, signal.SIGCONT)
            assert [(s, h["x-served-by"]) for s, h, _ in got] == [(200, "backup")] * 6, got
            deadline = time.monotonic() + 20
            while state(gw)["primary"]["s0"]["state"] != "up" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert state(gw)["primary"]["s0"] == {"state": "up", "outstanding": 0, "breaker": "closed",
                                                  "served": 0}
        finally:
            gw.stop()
