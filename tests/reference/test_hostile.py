"""Every hostile request in chaos.selftest.cases against a real replica: a clear answer, never a 5xx, never an engine
death, and afterwards the replica still serves with every KV block free."""

import time

import pytest

from chaos.selftest.cases import hostile_cases, send

from .http_util import metric, post, request

M = "chaos-reference"
CASES = hostile_cases(M, max_model_len=1024)  # the session server's context


def assert_serving_and_idle(base_url: str) -> None:
    """/health 200, a normal request 200, and (once idle) no KV block held and nothing running."""
    assert request(base_url, "GET", "/health")[0] == 200, "the replica stopped serving"
    status, _, body = post(base_url, "/v1/completions", {"model": M, "prompt": "still there?", "max_tokens": 3})
    assert status == 200, body
    deadline = time.monotonic() + 20  # generous: a busy machine may still be finishing a request
    while time.monotonic() < deadline:
        if metric(base_url, "vllm:num_requests_running") == 0 and metric(base_url, "vllm:kv_cache_usage_perc") == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"KV blocks still in use once idle: usage {metric(base_url, 'vllm:kv_cache_usage_perc')}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_request_gets_a_clear_answer_and_the_replica_serves_on(server, case):
    status, headers, body = send(case, server.base_url)
    assert status in case.expect, f"{case.name}: {status} {str(body)[:300]}"
    if status >= 400:
        assert isinstance(body, dict) and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert body["error"]["message"]
        if case.param is not None:
            assert body["error"]["param"] == case.param, body
    assert_serving_and_idle(server.base_url)


def test_the_list_covers_every_item_of_the_issue():
    names = " ".join(c.name for c in CASES)
    for needle in ("seed=", "temperature=", "top_p=", "top_k=", "n=", "logprobs=", "max_tokens=", "stop=",
                   "logit_bias=", "NaN", "Infinity", "surrogate", "33 MB", "chunked", "1,000 deep", "100,000 deep",
                   "content type", "invalid JSON", "unknown fields", "over the context", "pushing past the context",
                   "prompt=\"\"", "messages=[]"):
        assert needle in names, needle
