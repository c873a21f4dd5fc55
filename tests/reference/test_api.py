"""The happy paths of the HTTP API, over real loopback HTTP against a real replica."""

import threading

from .http_util import metric, post, request, sse

M = "chaos-reference"


def test_models_lists_the_model_with_max_model_len(server):
    status, headers, body = request(server.base_url, "GET", "/v1/models")
    assert status == 200
    assert body["object"] == "list"
    assert body["data"][0]["id"] == M and body["data"][0]["max_model_len"] == 1024


def test_health_is_200_with_empty_body(server):
    status, headers, body = request(server.base_url, "GET", "/health")
    assert status == 200 and body is None and headers["x-served-by"] == "t0"


def test_completion_not_streamed(server):
    status, headers, body = post(server.base_url, "/v1/completions",
                                 {"model": M, "prompt": "Hello", "max_tokens": 7, "temperature": 0, "ignore_eos": True},
                                 headers={"X-Request-Id": "abc-123"})
    assert status == 200
    assert headers["x-request-id"] == "abc-123" and headers["x-served-by"] == "t0"
    assert body["object"] == "text_completion" and body["system_fingerprint"] == "t0"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 7, "total_tokens": 13,
                             "prompt_tokens_details": {"cached_tokens": 0}}


def test_chat_streamed_with_usage_and_done(server):
    body = {"model": M, "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 12, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    status, headers, events = sse(server.base_url, "/v1/chat/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["system_fingerprint"] == "t0" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "length" and finish["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
    # The same request, not streamed, gives the same text (greedy).
    plain = post(server.base_url, "/v1/chat/completions", {**body, "stream": False})[2]
    assert plain["choices"][0]["message"]["content"] == text
    assert plain["usage"]["prompt_tokens"] == usage["usage"]["prompt_tokens"]


def test_completion_stream_without_usage(server):
    status, _, events = sse(server.base_url, "/v1/completions",
                            {"model": M, "prompt": "abc", "max_tokens": 5, "stream": True, "ignore_eos": True})
    assert status == 200 and events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert all(e["object"] == "text_completion" for e in events[:-1])


def test_greedy_output_does_not_depend_on_concurrent_load(server):
    body = {"model": M, "prompt": "determinism", "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    alone = post(server.base_url, "/v1/completions", body)[2]["choices"][0]["text"]
    results = []

    def noisy(i):
        results.append(post(server.base_url, "/v1/completions",
                            {"model": M, "prompt": f"noise {i} " * (i + 1), "max_tokens": 30, "temperature": 1.0})[0])

    threads = [threading.Thread(target=noisy, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    under_load = post(server.base_url, "/v1/completions", body)[2]["choices"][0]["text"]
    for t in threads:
        t.join()
    assert under_load == alone
    assert results == [200] * 8


def test_prefix_cache_hits_show_in_usage_and_metrics(server):
    system = "You are a careful assistant. " * 6
    hits_before = metric(server.base_url, "vllm:prefix_cache_hits_total")
    for q in ("first question", "second question"):
        body = {"model": M, "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                "max_tokens": 2}
        usage = post(server.base_url, "/v1/chat/completions", body)[2]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] >= 160
    assert metric(server.base_url, "vllm:prefix_cache_hits_total") - hits_before >= 160


def test_metrics_use_vllm_names(server):
    post(server.base_url, "/v1/completions", {"model": M, "prompt": "metrics", "max_tokens": 3, "stream": True})
    _, headers, text = request(server.base_url, "GET", "/metrics")
    assert headers["content-type"].startswith("text/plain")
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_sum",
                 'vllm:request_success_total{finished_reason="length"']:
        assert name in text, name
    assert 'model_name="chaos-reference"' in text
    assert metric(server.base_url, "vllm:generation_tokens_total") >= 3


def test_openai_client_streaming_and_not(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(model=M, messages=[{"role": "user", "content": "hello"}], max_tokens=9,
                                       temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 9 and r.system_fingerprint == "t0"
    text = r.choices[0].message.content
    parts, usage = [], None
    for chunk in client.chat.completions.create(model=M, messages=[{"role": "user", "content": "hello"}],
                                                max_tokens=9, temperature=0, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"ignore_eos": True}):
        if chunk.usage:
            usage = chunk.usage
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    assert "".join(parts) == text and usage.completion_tokens == 9
    c = client.completions.create(model=M, prompt="hello", max_tokens=4)
    assert c.usage.completion_tokens <= 4
    models = client.models.list()
    assert models.data[0].id == M
    import openai
    import pytest

    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=M, prompt="x" * 2000)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")


def test_chaos_timing_is_the_servers_own_clock_streamed_and_not(server):
    import json
    import time

    from .http_util import conn

    body = {"model": M, "prompt": "timing", "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    c = conn(server.base_url)
    sent = time.time()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first_content, chunks = None, []
    while line := r.readline():
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if first_content is None and chunk["choices"] and chunk["choices"][0]["text"]:
            first_content = time.time()
        chunks.append(chunk)
    done = time.time()
    c.close()
    timed = [ch for ch in chunks if "chaos_timing" in ch]
    assert len(timed) == 1 and timed[0]["choices"][0]["finish_reason"] == "length"  # only the finish chunk
    t = timed[0]["chaos_timing"]
    slack = 0.05  # same machine, same clock: only scheduling separates the two sides
    assert sent - slack <= t["arrival"] <= t["first_token"] <= t["end"] <= done + slack, (sent, t, done)
    assert t["first_token"] <= first_content + slack  # written before the client read it
    assert t["first_token"] - t["arrival"] <= first_content - sent + slack  # so the server's TTFT is the smaller

    sent = time.time()
    status, _, plain = post(server.base_url, "/v1/completions", {**body, "stream": False})
    done = time.time()
    t = plain["chaos_timing"]
    assert status == 200 and sent - slack <= t["arrival"] <= t["first_token"] <= t["end"] <= done + slack
