"""Every hostile request of chaos/selftest/cases.py, sent THROUGH a real gateway to two real replicas: each gets
the answer a good replica gives (a clear 4xx, or 200 where the input is extreme but valid; never a 5xx), none is
retried, no replica is ejected, no breaker opens, and a normal request is then served by a primary."""

import pytest

from chaos.reference.launcher import start_gateway

from ..http_util import metric, post, request
from .util import BODY, M, settings, state

cases_module = pytest.importorskip("chaos.selftest.cases")


@pytest.fixture(scope="module")
def front(pair):
    gw = start_gateway(pair, args=settings())
    try:
        yield gw, pair
    finally:
        gw.stop()


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_every_hostile_request_through_the_gateway(front):
    gw, _ = front
    max_model_len = request(gw.base_url, "GET", "/v1/models")[2]["data"][0]["max_model_len"]
    cases = cases_module.hostile_cases(M, max_model_len)
    wrong = []
    for case in cases:
        status, headers, body = cases_module.send(case, gw.base_url, timeout=120)
        if status not in case.expect:
            wrong.append(f"{case.name}: {status} (want {case.expect}) {str(body)[:160]}")
            continue
        if status >= 400:
            if not (isinstance(body, dict) and set(body.get("error", {})) == {"message", "type", "param", "code"}):
                wrong.append(f"{case.name}: {status} without an OpenAI-shaped body: {str(body)[:160]}")
            elif case.param is not None and body["error"]["param"] != case.param:
                wrong.append(f"{case.name}: param {body['error']['param']!r}, want {case.param!r}")
        if headers.get("x-gateway-attempts", "1") != "1":
            wrong.append(f"{case.name}: retried ({headers['x-gateway-attempts']} attempts)")
    assert not wrong, f"{len(wrong)} of {len(cases)} cases:\n" + "\n".join(wrong)
    assert metric(gw.base_url, "gateway:retries_total") == 0  # no retry storm: a client's error is its own
    st = state(gw)["primary"]
    assert all(u["state"] == "up" and u["breaker"] == "closed" for u in st.values()), st
    status, headers, _ = post(gw.base_url, "/v1/completions", BODY)
    assert status == 200 and headers["x-served-by"] in st


@pytest.mark.parametrize("per_mb, want", [(0.0, 503), (0.5, 400)])
def test_a_large_body_gets_time_to_be_parsed_under_auto_timeouts(pair, per_mb, want):
    """Found by the abnormal-input batch under load: "auto" learns its first-token timeout from ordinary requests,
    and a 20 MB over-context body cannot be sent and parsed within it; each attempt timed out, was retried, and the
    client got 503 all_upstreams_unavailable instead of the replica's 400. With the per-MB allowance (default) the
    replica's 400 comes through. auto_default_s (the timeout before samples exist) is set tiny to stand for a
    timeout learned from small requests; per_mb 0 shows the check can fail."""
    gw = start_gateway(pair, args=settings(first_token_timeout="auto", auto_default_s=0.05,
                                           auto_body_s_per_mb=per_mb, eject_after_failures=100))
    try:
        case = next(c for c in cases_module.hostile_cases(M, 1024) if c.name == "20 MB prompt (over the context)")
        status, _, body = cases_module.send(case, gw.base_url, timeout=120)
        assert status == want, body
        if want == 400:
            assert body["error"]["code"] == "context_length_exceeded"
    finally:
        gw.stop()
