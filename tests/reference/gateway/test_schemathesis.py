"""Schemathesis against a real gateway in front of two real replicas, over HTTP on loopback, from the document the
gateway serves at GET /openapi.json. The gateway declares the model its upstreams list (and their context), so
generated requests go through it to the engines. Afterwards the gateway and both replicas still run and serve,
nothing is in flight or queued at the gateway, every replica's KV blocks are free again, and no process logged a
traceback.

CI budget (tests/schemafuzz.py, CHAOS_SCHEMA_EXAMPLES unset: 25): 648 cases over 6 operations (318 chat, 290
completions), 7-23 s on a busy two-core machine. CHAOS_SCHEMA_EXAMPLES=1000: 2,598 cases, 109 s. Each run prints its
figures (pytest -rP or -s).
"""

import time

import pytest
import schemathesis

from chaos.reference.launcher import start_gateway

from ...schemafuzz import SETTINGS, Tally, context_refusal, tracebacks
from ..http_util import metric, post, request
from .util import BODY, replicas, settings, state, stop

pytestmark = [pytest.mark.slow, pytest.mark.beside]


class Gateway:
    """The gateway and its replicas under test, the cases, and what must hold once they ended."""

    def __init__(self, gw, rs):
        self.gw, self.replicas, self.tally = gw, rs, Tally("the gateway")

    def check_after(self) -> None:
        for p in (self.gw, *self.replicas):
            assert p.proc.poll() is None, f"{p.base_url} exited ({p.proc.returncode}): {p.output[-20:]}"
        assert request(self.gw.base_url, "GET", "/health")[0] == 200
        status, _, body = post(self.gw.base_url, "/v1/completions", BODY)
        assert status == 200, body
        deadline = time.monotonic() + 20  # generous: a busy machine may still be finishing a request
        while not self.idle() and time.monotonic() < deadline:
            time.sleep(0.05)
        st = state(self.gw)
        assert st["in_flight"] == 0 and st["queued"] == 0, st
        for r in self.replicas:
            assert request(r.base_url, "GET", "/health")[0] == 200
            assert metric(r.base_url, "vllm:num_requests_running") == 0
            assert metric(r.base_url, "vllm:kv_cache_usage_perc") == 0, f"{r.base_url}: KV blocks still held"
        for p in (self.gw, *self.replicas):
            assert not tracebacks(p.output), "\n".join(p.output[-60:])

    def idle(self) -> bool:
        st = state(self.gw)
        return st["in_flight"] == 0 and st["queued"] == 0 and all(
            metric(r.base_url, "vllm:num_requests_running") == 0 and metric(r.base_url, "vllm:kv_cache_usage_perc")
            == 0 for r in self.replicas)


@pytest.fixture
def gateway():
    rs = replicas(2, "--max-model-len", "128", "--max-waiting", "64", "--default-max-tokens", "16", prefix="st")
    try:
        gw = start_gateway(rs, args=settings())
        try:
            g = Gateway(gw, rs)
            yield g
            try:
                g.tally.report(reached=("POST /v1/completions", "POST /v1/chat/completions"))
            finally:
                g.check_after()
        finally:
            gw.stop()
    finally:
        stop(*rs)


@pytest.fixture
def gateway_schema(gateway):
    schema = gateway.tally.load(gateway.gw.base_url + "/openapi.json")
    props = schema.raw_schema["components"]["schemas"]["CompletionRequest"]["properties"]
    assert props["model"]["enum"] == [BODY["model"]] and props["max_tokens"]["maximum"] == 127  # the replicas'
    return schema


schema = schemathesis.pytest.from_fixture("gateway_schema")


@schema.parametrize()
@SETTINGS
def test_the_gateway_conforms_to_its_document(case, gateway):
    gateway.tally.call_and_validate(case, tolerate=context_refusal)
