"""Raw HTTP/1.1 protocol abuse against a real replica process (issue 30): 18 cases - heads over 8 KB and 64 KB
(a long URL, one big header, many headers), too many headers, bad chunked framing (sent with the head and after
it), chunked with Content-Length, a Content-Length the client never fulfils (waiting, and half-closed), and 1,000
idle connections at once. After each: no 5xx, every error body OpenAI-shaped JSON, the process alive, /health 200,
a normal request served, and every KV block free again.

aiohttp's own parser answers most of these; chaos/reference/serving.py makes that answer JSON (the last test here
fails loudly if aiohttp stops calling the hook it uses). Slowloris heads and trickled bodies are test_limits.py's.
"""

import asyncio
import json
import socket

import aiohttp
import pytest
from aiohttp import web

from chaos.reference import serving
from chaos.reference.launcher import start_server
from tests.protocol_abuse import (AIOHTTP_EXPECT, Case, IdleConnections, address, cases, check, check_idle_closed,
                                  ensure_fds, read_answer, send, wait_kv_free)

from .http_util import post, request

M = "chaos-reference"
TIMEOUT_S = 1.5  # --header-timeout and --body-timeout of this module's replica
IDLE = 1000
BODY = json.dumps({"model": M, "prompt": "abuse", "max_tokens": 2}).encode()
CASES = cases("/v1/completions", BODY)

EXPECT = AIOHTTP_EXPECT


@pytest.fixture(scope="module")
def replica():
    ensure_fds(IDLE)  # before the start: the replica inherits the limit
    with start_server(["--preset", "tiny", "--replica-id", "abuse", "--header-timeout", f"{TIMEOUT_S}s",
                       "--body-timeout", f"{TIMEOUT_S}s"]) as s:
        yield s


def assert_healthy(replica) -> None:
    """Alive, /health 200, a normal request served, and once idle nothing running and no KV block held."""
    assert replica.proc.poll() is None, "the replica died: " + " | ".join(replica.output[-5:])
    assert request(replica.base_url, "GET", "/health")[0] == 200
    status, _, body = post(replica.base_url, "/v1/completions", {"model": M, "prompt": "still there?",
                                                                 "max_tokens": 2})
    assert status == 200, body
    wait_kv_free(replica.base_url)


def test_every_case_has_an_expectation():
    assert sorted(EXPECT) == sorted(c.name for c in CASES)
    assert len(CASES) + 1 == 18  # and the 1,000 idle connections: the count in the docstring


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_request(replica, case: Case):
    answer = send(replica.base_url, case, see_close=EXPECT[case.name][1])
    check(answer, EXPECT[case.name])
    if answer.status == 400:
        assert code(answer) in ("invalid_http_request", "request_head_too_large"), answer.body
    if answer.status == 408:
        assert code(answer) == "request_timeout" and b"--body-timeout" in answer.body, answer.body
    assert_healthy(replica)


def code(answer) -> str:
    return json.loads(answer.body)["error"]["code"]


def test_1000_idle_connections(replica):
    with IdleConnections(replica.base_url, IDLE) as idle:
        # Meanwhile (the idle ones are closed a header timeout after each opened, answered or not yet):
        assert request(replica.base_url, "GET", "/health")[0] == 200
        status, _, body = post(replica.base_url, "/v1/completions", {"model": M, "prompt": "busy", "max_tokens": 2})
        assert status == 200, body
        results = idle.collect(limit_s=TIMEOUT_S + 60)  # generous: 1,000 closes on a busy machine
    check_idle_closed(results, TIMEOUT_S)
    assert_healthy(replica)


def test_the_json_hook_still_applies_to_aiohttps_own_errors(replica):
    """serving._JsonErrorHandler overrides RequestHandler.handle_error, aiohttp's only hook for the answer its
    parser gives. If a new aiohttp stops calling it (or makes its handlers another way), its text/plain answers
    come back: this says so by name rather than through the cases above."""
    hint = (f"aiohttp {aiohttp.__version__}: redo the JSON hook in chaos/reference/serving.py "
            "(_JsonErrorHandler, _json_errors)")
    assert callable(getattr(web.RequestHandler, "handle_error", None)), f"RequestHandler.handle_error is gone; {hint}"

    async def made() -> type:
        server = web.Server(lambda r: web.Response())
        return type(serving._json_errors(server()))

    assert asyncio.run(made()) is serving._JsonErrorHandler, f"aiohttp's handlers are no longer swapped; {hint}"
    with socket.create_connection(address(replica.base_url), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n")
        answer = read_answer(s)
    assert answer.status == 400, answer.raw[:300]
    assert answer.headers.get("content-type", "").startswith("application/json"), \
        f"aiohttp answered its parser error in {answer.headers.get('content-type')!r}, not JSON; {hint}"
    assert code(answer) == "invalid_http_request"
