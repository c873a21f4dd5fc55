"""Effects on the SSE stream, each end to end through the proxy."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from .conftest import chat, contents, events

WORDS = [f"w{i} " for i in range(6)]


def _run(proxy, rule: dict, **kw):
    proxy.add(rule)
    t0 = time.monotonic()
    status, h, body = chat(proxy.port, n=6, headers={"x-request-id": "s-1"}, **kw)
    took = time.monotonic() - t0
    assert status == 200
    assert h["x-chaos-fault"] == [f"{rule['name']}; {rule['effect']}"]
    return body, took, proxy.log(1)[0]


def test_first_token_delay_after_and_before_headers(proxy):
    body, took, line = _run(proxy, {"name": "f", "effect": "first_token_delay", "params": {"delay_s": 0.3}})
    assert contents(body) == WORDS and took >= 0.28 and "first token" in line["detail"]
    proxy.remove("f")
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    proxy.add({"name": "g", "effect": "first_token_delay", "params": {"delay_s": 0.3, "where": "before_headers"}})
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps({"stream": True}), {"Content-Type": "application/json"})
    r = c.getresponse()  # the head itself comes late
    assert time.monotonic() - t0 >= 0.28 and r.getheader("x-chaos-fault") == "g; first_token_delay"
    assert r.read().endswith(b"data: [DONE]\n\n")


def test_token_delay_keeps_order(proxy):
    body, took, line = _run(proxy, {"name": "t", "effect": "token_delay", "params": {"delay_s": 0.04, "jitter_s": 0.02}})
    assert contents(body) == WORDS
    assert took >= 0.04 * 9 * 0.9  # 9 events (role, 6 words, finish, DONE) each delayed
    assert "delayed 9 events" in line["detail"]


def test_stall_then_the_stream_goes_on(proxy):
    body, took, line = _run(proxy, {"name": "s", "effect": "stall", "params": {"after_tokens": 2, "for_s": 0.4}})
    assert contents(body) == WORDS and took >= 0.38
    assert line["detail"] == "stalled 0.4s after 2 tokens"


def test_removing_the_rule_ends_a_stall_in_progress(proxy):
    proxy.add({"name": "s", "effect": "stall", "params": {"after_tokens": 1, "for_s": 30}})
    out = {}
    t = threading.Thread(target=lambda: out.update(r=chat(proxy.port, n=6, timeout=20)))
    t0 = time.monotonic()
    t.start()
    time.sleep(0.4)
    assert t.is_alive()  # stalled
    proxy.remove("s")
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 5
    assert contents(out["r"][2]) == WORDS  # the stream went on, whole
    assert "ended early: rule removed" in proxy.log(1)[0]["detail"]


def test_cut_ends_cleanly_without_done(proxy):
    body, _, line = _run(proxy, {"name": "c", "effect": "cut", "params": {"after_tokens": 3}})
    assert contents(body) == WORDS[:3] and "[DONE]" not in events(body)
    assert line["detail"] == "cut after 3 tokens"


def test_reset_is_a_connection_reset(proxy):
    proxy.add({"name": "r", "effect": "reset", "params": {"after_tokens": 2}})
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    c.request("POST", "/v1/chat/completions", json.dumps({"stream": True, "n": 6}), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("x-chaos-fault") == "r; reset"
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        while r.read(64):
            pass
    assert proxy.log(1)[0]["detail"] == "reset after 2 tokens"


def test_corrupt_sends_one_invalid_json_chunk(proxy):
    body, _, line = _run(proxy, {"name": "x", "effect": "corrupt", "params": {"after_tokens": 1}})
    bad = []
    for d in events(body):
        try:
            json.loads(d) if d != "[DONE]" else None
        except ValueError:
            bad.append(d)
    assert len(bad) == 1 and contents(body) == [WORDS[0], *WORDS[2:]]
    assert "corrupted" in line["detail"]


def test_error_event_on_the_200(proxy):
    body, _, line = _run(proxy, {"name": "e", "effect": "error_event", "params": {"after_tokens": 2, "code": "boom"}})
    evs = events(body)
    assert contents(body) == WORDS[:2]
    assert json.loads(evs[-2])["error"]["code"] == "boom" and evs[-1] == "[DONE]"
    assert line["detail"] == "error event after 2 tokens"


def test_drop_usage_and_drop_done(make_proxy):
    p = make_proxy()
    body, _, line = _run(p, {"name": "u", "effect": "drop_usage"}, stream_options={"include_usage": True})
    assert not any('"usage"' in d for d in events(body)) and events(body)[-1] == "[DONE]"
    assert line["detail"] == "dropped the usage chunk"
    q = make_proxy()
    body, _, line = _run(q, {"name": "d", "effect": "drop_done"})
    assert "[DONE]" not in events(body) and contents(body) == WORDS  # and http.client saw a complete body
    assert line["detail"] == "dropped [DONE]"


def test_duplicate_and_reorder(make_proxy):
    body, _, line = _run(make_proxy(), {"name": "d", "effect": "duplicate", "params": {"after_tokens": 2}})
    assert contents(body) == WORDS[:3] + WORDS[2:]
    body, _, line = _run(make_proxy(), {"name": "r", "effect": "reorder", "params": {"after_tokens": 1}})
    assert contents(body) == [WORDS[0], WORDS[2], WORDS[1], *WORDS[3:]]
    assert line["detail"] == "swapped the chunks after 1 tokens"


def test_stream_faults_need_a_stream(proxy):
    proxy.add({"name": "c", "effect": "cut"})
    status, h, body = chat(proxy.port, stream=False)
    assert status == 200 and json.loads(body)["object"] == "chat.completion"
    assert "nothing to act on" in proxy.log(1)[0]["detail"]


def test_two_rules_act_on_one_stream_and_removal_stops_a_delay_midway(proxy):
    proxy.add({"name": "slow", "effect": "token_delay", "params": {"delay_s": 0.1}})
    proxy.add({"name": "nu", "effect": "drop_usage"})
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    c.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
              body=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "n": 30,
                               "stream_options": {"include_usage": True}}))
    r = c.getresponse()
    # Removed midway, by the stream's state and not a guessed time: once a delayed event has come through
    first = r.readline()
    assert first.startswith(b"data: "), first
    t0 = time.monotonic()
    proxy.remove("slow")  # 34 events at 0.1 s would take 3.4 s; the rest now goes at once
    body = first + r.read()
    took = time.monotonic() - t0
    status, h = r.status, {}
    for k, v in r.getheaders():
        h.setdefault(k.lower(), []).append(v)
    c.close()
    assert status == 200 and h["x-chaos-fault"] == ["slow; token_delay", "nu; drop_usage"]
    assert contents(body) == [f"w{i} " for i in range(30)] and events(body)[-1] == "[DONE]"
    assert not any('"usage"' in d for d in events(body))
    assert took < 2.0
    assert {ln["fault"] for ln in proxy.log(2)} == {"slow", "nu"}
