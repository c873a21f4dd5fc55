"""What a user of openai-python sees through the proxy in front of the real reference server (tiny preset)."""

from __future__ import annotations

import json
import time

import openai
import pytest

from chaos.reference.launcher import start_server

MSG = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def reference():
    with start_server(["--preset", "tiny", "--threads", "1", "--default-max-tokens", "16"]) as s:
        yield s


@pytest.fixture
def ref_proxy(make_proxy, reference):
    p = make_proxy(reference.base_url.rstrip("/"))
    p.client = lambda **kw: openai.OpenAI(base_url=p.url + "/v1", api_key="k", **{"max_retries": 0, **kw})
    return p


def _model(client) -> str:
    return client.models.list().data[0].id


def test_passthrough_and_429_with_retry_after(ref_proxy):
    c = ref_proxy.client()
    model = _model(c)
    out = c.chat.completions.create(model=model, messages=MSG, max_tokens=8)
    assert out.choices[0].message.content is not None
    ref_proxy.add({"name": "rl", "effect": "status", "params": {"status": 429, "retry_after": 3}})
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model=model, messages=MSG, max_tokens=8)
    assert e.value.status_code == 429 and e.value.code == "rate_limit_exceeded"
    assert e.value.response.headers["retry-after"] == "3"
    assert e.value.response.headers["x-chaos-fault"] == "rl; status"


def test_openai_retries_through_a_short_storm(ref_proxy):
    model = _model(ref_proxy.client())
    ref_proxy.add({"name": "st", "effect": "storm", "params": {"length": 1, "retry_after": 0.2}})
    t0 = time.monotonic()
    out = ref_proxy.client(max_retries=2).chat.completions.create(model=model, messages=MSG, max_tokens=4)
    assert out.choices[0].finish_reason in ("stop", "length")
    assert time.monotonic() - t0 >= 0.15  # it waited as told before retrying
    assert ref_proxy.rules()[0]["matched"] == 2 and ref_proxy.rules()[0]["applied"] == 1


def _stream(client, model):
    return client.chat.completions.create(model=model, messages=MSG, max_tokens=12, stream=True,
                                          extra_body={"ignore_eos": True})


def test_stream_faults_as_openai_python_sees_them(ref_proxy):
    c = ref_proxy.client()
    model = _model(c)
    full = [ch for ch in _stream(c, model)]
    assert len([ch for ch in full if ch.choices and ch.choices[0].delta.content]) >= 4

    ref_proxy.add({"name": "e", "effect": "error_event", "params": {"after_tokens": 2, "message": "engine died"}})
    with pytest.raises(openai.APIError, match="engine died"):
        for _ in _stream(c, model):
            pass
    ref_proxy.remove("e")

    ref_proxy.add({"name": "x", "effect": "corrupt", "params": {"after_tokens": 2}})
    with pytest.raises(json.JSONDecodeError):
        for _ in _stream(c, model):
            pass
    ref_proxy.remove("x")

    ref_proxy.add({"name": "r", "effect": "reset", "params": {"after_tokens": 2}})
    with pytest.raises(openai.APIConnectionError):  # the connection reset mid-body, as openai-python reports it
        for _ in _stream(c, model):
            pass
    ref_proxy.remove("r")

    ref_proxy.add({"name": "c", "effect": "cut", "params": {"after_tokens": 2}})
    got = [ch for ch in _stream(c, model) if ch.choices and ch.choices[0].delta.content]
    assert len(got) == 2  # the stream just ends early: no error, no finish_reason
    ref_proxy.remove("c")
    assert [ln["effect"] for ln in ref_proxy.log(4)] == ["error_event", "corrupt", "reset", "cut"]
