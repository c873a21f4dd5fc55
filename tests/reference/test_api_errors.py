"""Every bad input gets a 4xx in OpenAI's error shape: never a 500, a hang or a crash."""

import pytest

from .http_util import post, request

M = "chaos-reference"


def assert_error(resp, status, code=None, param=None, type_="invalid_request_error"):
    got_status, headers, body = resp
    assert got_status == status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == type_
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert err["param"] == param
    assert headers["x-served-by"] == "t0"
    return err


def test_prompt_over_context_limit_states_both_numbers(server):
    err = assert_error(post(server.base_url, "/v1/completions", {"model": M, "prompt": "x" * 1500}),
                       400, "context_length_exceeded", "prompt")
    assert "1024" in err["message"] and "1501" in err["message"]


def test_chat_over_context_limit(server):
    body = {"model": M, "messages": [{"role": "user", "content": "y" * 2000}]}
    assert_error(post(server.base_url, "/v1/chat/completions", body), 400, "context_length_exceeded", "messages")


def test_prompt_plus_max_tokens_over_limit_names_max_tokens(server):
    err = assert_error(post(server.base_url, "/v1/completions", {"model": M, "prompt": "x" * 999, "max_tokens": 100}),
                       400, "context_length_exceeded", "max_tokens")
    assert "1100" in err["message"] and "1024" in err["message"]


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"model": M, "prompt": ""}, "prompt"),
    ("/v1/completions", {"model": M, "prompt": []}, "prompt"),
    ("/v1/completions", {"model": M}, "prompt"),
    ("/v1/chat/completions", {"model": M, "messages": []}, "messages"),
    ("/v1/chat/completions", {"model": M, "messages": [{"role": "user", "content": ""}]}, "messages"),
    ("/v1/chat/completions", {"model": M}, "messages"),
])
def test_empty_input_is_400(server, path, body, param):
    assert_error(post(server.base_url, path, body), 400, param=param)


@pytest.mark.parametrize("field,value,code", [
    ("temperature", -0.1, "decimal_below_min_value"),
    ("temperature", 2.5, "decimal_above_max_value"),
    ("temperature", "hot", "invalid_type"),
    ("top_p", 0, "decimal_below_min_value"),
    ("top_p", 1.01, "decimal_above_max_value"),
    ("max_tokens", 0, "integer_below_min_value"),
    ("max_tokens", -5, "integer_below_min_value"),
    ("max_tokens", "ten", "invalid_type"),
    ("max_tokens", 3.5, "invalid_type"),
    ("max_tokens", True, "invalid_type"),
    ("stream", "yes", "invalid_type"),
    ("seed", "x", "invalid_type"),
    ("stop", 5, "invalid_type"),
    ("n", 3, "unsupported_value"),
    ("stream_options", 1, "invalid_type"),
])
def test_invalid_parameters_are_400_not_422(server, field, value, code):
    body = {"model": M, "prompt": "hello", field: value}
    assert_error(post(server.base_url, "/v1/completions", body), 400, code, field)


@pytest.mark.parametrize("messages,param", [
    ("hello", "messages"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    (["hi"], "messages[0]"),
])
def test_malformed_messages_are_400(server, messages, param):
    assert_error(post(server.base_url, "/v1/chat/completions", {"model": M, "messages": messages}), 400, param=param)


@pytest.mark.parametrize("raw,ctype,code", [
    (b"{not json", "application/json", "invalid_json"),
    (b"[1, 2]", "application/json", "invalid_json"),
    (b"\xff\xfe", "application/json", "invalid_json"),
    (b'{"model": "chaos-reference", "prompt": "hi"}', "text/plain", "invalid_content_type"),
    (b'{"model": "chaos-reference", "prompt": "hi"}', "", "invalid_content_type"),
])
def test_malformed_body_or_content_type_is_400(server, raw, ctype, code):
    resp = post(server.base_url, "/v1/completions", raw=raw, headers={"Content-Type": ctype})
    assert_error(resp, 400, code)


def test_unknown_model_is_404(server):
    assert_error(post(server.base_url, "/v1/completions", {"model": "gpt-9", "prompt": "hi"}), 404,
                 "model_not_found", "model")


def test_unknown_route_and_method_are_openai_shaped(server):
    assert request(server.base_url, "GET", "/v1/nothing")[2]["error"]["code"] == "not_found"
    status, headers, body = request(server.base_url, "GET", "/v1/completions")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    assert headers["allow"] == "POST"  # RFC 9110: a 405 says what the route takes


def test_error_body_is_common_openai_error_field_for_field(server):
    """The server answers in chaos.common's one shape: same keys in the same order, nothing more."""
    from chaos.common import openai_error

    status, _, body = post(server.base_url, "/v1/completions", {"model": "gpt-9", "prompt": "hi"})
    err = body["error"]
    want = openai_error(err["message"], "invalid_request_error", "model_not_found", "model")
    assert status == 404 and list(body.items()) == list(want.items())
    assert list(err) == ["message", "type", "param", "code"]


def test_special_characters_and_repetition_are_served(server):
    for prompt in ["\x00\x01\u202e\ud7ff" + "💥" * 20, "ha" * 400, "<|im_end|></s>"]:
        status, _, body = post(server.base_url, "/v1/completions", {"model": M, "prompt": prompt, "max_tokens": 4})
        assert status == 200, body
        assert body["usage"]["prompt_tokens"] == 1 + len(prompt.encode("utf-8", "surrogatepass"))


def test_queue_full_is_429_with_retry_after_rounded_up(server):
    import threading
    import time

    from .http_util import metric, sse

    # Stall the engine so requests pile up in the waiting queue (bound 64), then revert.
    assert post(server.base_url, "/admin/faults", {"hang_s": 120})[0] == 200
    results = []
    body = {"model": M, "prompt": "q", "max_tokens": 2, "stream": True}
    threads = [threading.Thread(target=lambda: results.append(sse(server.base_url, "/v1/completions", body)))
               for _ in range(64)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while metric(server.base_url, "vllm:num_requests_waiting") < 64 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, headers, err = post(server.base_url, "/v1/completions", {"model": M, "prompt": "q", "max_tokens": 2})
        assert status == 429, err
        assert err["error"]["code"] == "rate_limit_exceeded" and err["error"]["type"] == "requests"
        # The session server runs with --retry-after 2.5: whole seconds rounded up (a client that waits what the
        # header says never comes back early), milliseconds exact.
        assert headers["retry-after"] == "3" and headers["retry-after-ms"] == "2500"
    finally:
        request(server.base_url, "DELETE", "/admin/faults")
        for t in threads:
            t.join(60)
    # Once the hang is reverted, every queued stream completes normally.
    assert len(results) == 64
    assert all(status == 200 and events[-1] == "[DONE]" for status, _, events in results)
