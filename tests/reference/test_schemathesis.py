"""Schemathesis against a real reference server, over HTTP on loopback, from the document it serves at
GET /openapi.json: every operation, with the served model's name declared there, so generated requests reach the
engine. Afterwards the process still runs, /health is 200, it still serves, every KV block is free again and it
logged no traceback.

The server's context is 128 tokens, so no generated max_tokens makes a case slow. With fault hooks on, the fault
routes are documented and tested too, without the token: every case there must be refused with 401 (the token is
not given to schemathesis, because the hooks crash and hang the server on purpose).

CI budget (tests/schemafuzz.py, CHAOS_SCHEMA_EXAMPLES unset: 25): 882 cases over 9 operations (318 chat, 290
completions, 135 POST /admin/faults), 6-26 s on a busy two-core machine. CHAOS_SCHEMA_EXAMPLES=1000: 6,732 cases,
203 s. Each run prints its figures (pytest -rP or -s).
"""

import time

import pytest
import schemathesis

from chaos.reference.launcher import start_server

from ..schemafuzz import SETTINGS, Tally, context_refusal, tracebacks
from .http_util import metric, post, request

pytestmark = [pytest.mark.slow, pytest.mark.beside]

M = "chaos-reference"


class Reference:
    """The server under test, its cases, and what must hold once they ended."""

    def __init__(self, server):
        self.server, self.tally = server, Tally("the reference server")

    def check_after(self) -> None:
        s, url = self.server, self.server.base_url
        assert s.proc.poll() is None, f"the server exited ({s.proc.returncode}): {s.output[-20:]}"
        assert request(url, "GET", "/health")[0] == 200
        status, _, body = post(url, "/v1/completions", {"model": M, "prompt": "still there?", "max_tokens": 3})
        assert status == 200, body
        deadline = time.monotonic() + 20  # generous: a busy machine may still be finishing a request
        while (metric(url, "vllm:num_requests_running") or metric(url, "vllm:kv_cache_usage_perc")) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(url, "vllm:num_requests_running") == 0
        assert metric(url, "vllm:kv_cache_usage_perc") == 0, "KV blocks still held once every request ended"
        assert metric(url, "vllm:num_requests_waiting") == 0
        assert not tracebacks(s.output), "\n".join(s.output[-60:])


@pytest.fixture
def reference():
    with start_server(["--preset", "tiny", "--replica-id", "st0", "--max-model-len", "128",
                       "--enable-fault-hooks", "--max-waiting", "64", "--default-max-tokens", "16"]) as s:
        ref = Reference(s)
        yield ref
        try:
            ref.tally.report(reached=("POST /v1/completions", "POST /v1/chat/completions"))
        finally:
            ref.check_after()


@pytest.fixture
def reference_schema(reference):
    return reference.tally.load(reference.server.base_url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("reference_schema")


@schema.parametrize()
@SETTINGS
def test_the_reference_server_conforms_to_its_document(case, reference):
    reference.tally.call_and_validate(case, tolerate=context_refusal)
