"""Raw HTTP/1.1 protocol abuse against a real gateway process in front of a stub upstream process (issue 30): 18
cases - heads over 8 KB and 64 KB (a long URL, one big header, many headers), too many headers, bad chunked
framing (sent with the head and after it), chunked with Content-Length, a Content-Length the client never fulfils
(waiting, and half-closed), and 1,000 idle connections at once. After each: no 5xx, every error body OpenAI-shaped
JSON, the gateway alive, its /health 200 and its upstream still up, a normal request served, and nothing of the
malformed requests forwarded. The gateway parses HTTP/1.1 itself (chaos/http1/server.py on wire.py, as
the LLM fault proxy does): a head up to 64 KB is valid to it, past that 431; every bad body framing is refused
before any of it goes upstream. Slowloris and trickled bodies are test_edge.py's.
"""

import json

import pytest

from chaos.reference.launcher import start_gateway
from tests.protocol_abuse import (H1_CODES, H1_EXPECT, Case, IdleConnections, cases, check, check_idle_closed,
                                  ensure_fds, send)

from ..http_util import post, request
from .stub import Stub
from .util import BODY, gateway_args, state

TIMEOUT_S = 1.5  # header_timeout_s and body_timeout_s of this module's gateway
IDLE = 1000
CASES = cases("/v1/completions", json.dumps(BODY).encode())

EXPECT, CODES = H1_EXPECT, H1_CODES  # the LLM fault proxy's HTTP/1.1 side, where it answers itself


@pytest.fixture(scope="module")
def edge():
    ensure_fds(IDLE)  # before the start: the gateway inherits the limit
    with Stub(name="s0") as s0:
        gw = start_gateway([], args=gateway_args({"s0": s0.url}, header_timeout_s=TIMEOUT_S,
                                                 body_timeout_s=TIMEOUT_S))
        try:
            yield gw, s0
        finally:
            gw.stop()


def assert_healthy(gw, s0, forwarded_before: int) -> None:
    """Alive, /health 200, the upstream still up, nothing malformed forwarded, and a normal request served."""
    assert gw.proc.poll() is None, "the gateway died: " + " | ".join(gw.output[-5:])
    assert request(gw.base_url, "GET", "/health")[0] == 200
    assert state(gw)["primary"]["s0"]["state"] == "up"
    assert s0.stats()["requests"] == forwarded_before, "a malformed request reached the upstream"
    status, _, body = post(gw.base_url, "/v1/completions", BODY)
    assert status == 200, body


def test_every_case_has_an_expectation():
    assert sorted(EXPECT) == sorted(c.name for c in CASES)
    assert len(CASES) + 1 == 18  # and the 1,000 idle connections: the count in the docstring


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_request(edge, case: Case):
    gw, s0 = edge
    before = s0.stats()["requests"]
    answer = send(gw.base_url, case, see_close=EXPECT[case.name][1])
    check(answer, EXPECT[case.name])
    if answer.status in CODES:
        assert code(answer) in CODES[answer.status], answer.body
        assert answer.headers["x-served-by"] == "gateway", answer.headers
    assert_healthy(gw, s0, before)


def code(answer) -> str:
    return json.loads(answer.body)["error"]["code"]


def test_1000_idle_connections(edge):
    gw, s0 = edge
    with IdleConnections(gw.base_url, IDLE) as idle:
        assert request(gw.base_url, "GET", "/health")[0] == 200  # meanwhile
        status, _, body = post(gw.base_url, "/v1/completions", BODY)
        assert status == 200, body
        results = idle.collect(limit_s=TIMEOUT_S + 60)  # generous: 1,000 closes on a busy machine
    check_idle_closed(results, TIMEOUT_S)
    assert_healthy(gw, s0, s0.stats()["requests"])
