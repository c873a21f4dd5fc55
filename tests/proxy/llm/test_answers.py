"""Effects that answer instead of the upstream, and those on the request."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from .conftest import chat


def test_status_429_carries_retry_after_header_and_log(proxy):
    proxy.add({"name": "rl", "effect": "status", "params": {"status": 429, "retry_after": 1.5}})
    status, h, body = chat(proxy.port, headers={"x-request-id": "r-1"})
    assert status == 429
    assert h["retry-after"] == ["2"] and h["retry-after-ms"] == ["1500"]
    assert h["x-chaos-fault"] == ["rl; status"] and h["x-request-id"] == ["r-1"]
    err = json.loads(body)["error"]
    assert err["type"] == "requests" and err["code"] == "rate_limit_exceeded"
    [line] = proxy.log(1)
    assert line["request_id"] == "r-1" and line["fault"] == "rl" and line["effect"] == "status"
    assert line["method"] == "POST" and line["path"] == "/v1/chat/completions" and "429" in line["detail"]


@pytest.mark.parametrize("status,type_,code", [(400, "invalid_request_error", "context_length_exceeded"),
                                               (401, "invalid_request_error", "invalid_api_key"),
                                               (503, "server_error", None), (504, "server_error", None)])
def test_status_codes_in_openai_shape(proxy, status, type_, code):
    proxy.add({"name": "s", "effect": "status", "params": {"status": status}})
    got, h, body = chat(proxy.port)
    err = json.loads(body)["error"]
    assert got == status and err["type"] == type_ and err["code"] == code
    assert (err["param"] == "messages") == (status == 400)
    assert "retry-after" not in h


def test_storm_then_recovery_and_repeat(make_proxy):
    once = make_proxy()
    once.add({"name": "st", "effect": "storm", "params": {"length": 3, "retry_after": 1}})
    assert [chat(once.port, stream=False)[0] for _ in range(6)] == [429] * 3 + [200] * 3
    cyc = make_proxy()
    cyc.add({"name": "st", "effect": "storm", "params": {"status": 503, "length": 2, "recover": 1, "repeat": True}})
    assert [chat(cyc.port, stream=False)[0] for _ in range(6)] == [503, 503, 200] * 2
    assert cyc.rules()[0]["applied"] == 4


def test_hang_until_the_rule_is_removed_then_passes_on(proxy):
    proxy.add({"name": "h", "effect": "hang"})
    out = {}
    t = threading.Thread(target=lambda: out.update(r=chat(proxy.port, stream=False, timeout=10)))
    t0 = time.monotonic()
    t.start()
    time.sleep(0.4)
    assert t.is_alive()
    proxy.remove("h")
    t.join(5)
    assert out["r"][0] == 200 and time.monotonic() - t0 >= 0.35
    assert "rule removed" in proxy.log(1)[0]["detail"]


def test_hang_until_the_client_gives_up(upstream, proxy):
    proxy.add({"name": "h", "effect": "hang", "params": {"max_s": 30}})
    with pytest.raises(TimeoutError):
        chat(proxy.port, timeout=0.3, headers={"x-request-id": "gave-up"})
    [line] = proxy.log(1)
    assert line["effect"] == "hang" and line["request_id"] == "gave-up"
    assert "gave-up" not in [r["id"] for r in upstream.requests]


def test_close_without_a_response(proxy):
    proxy.add({"name": "c", "effect": "close"})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        chat(proxy.port)
    assert proxy.log(1)[0]["detail"] == "closed without a response"


@pytest.mark.parametrize("kind", ["empty", "truncated", "invalid_json"])
def test_bad_body(proxy, kind):
    proxy.add({"name": "b", "effect": "bad_body", "params": {"kind": kind}})
    status, h, body = chat(proxy.port, stream=False)
    assert status == 200 and h["x-chaos-fault"] == ["b; bad_body"]
    assert (body == b"") == (kind == "empty")
    with pytest.raises(ValueError):
        json.loads(body)


def test_slow_upload(upstream, proxy):
    proxy.add({"name": "su", "effect": "slow_upload", "params": {"rate": 2000}})
    pad = "x" * 1000  # ~1.1 KB of body at 2 KB/s: about half a second
    t0 = time.monotonic()
    status, h, _ = chat(proxy.port, stream=False, padding=pad)
    took = time.monotonic() - t0
    assert status == 200 and h["x-chaos-fault"] == ["su; slow_upload"]
    assert took >= 0.4
    assert json.loads(upstream.requests[-1]["body"])["padding"] == pad
    assert "uploaded" in proxy.log(1)[0]["detail"]


def test_delay_then_forward(proxy):
    proxy.add({"name": "d", "effect": "delay", "params": {"delay_s": 0.3}})
    t0 = time.monotonic()
    assert chat(proxy.port, stream=False)[0] == 200
    assert time.monotonic() - t0 >= 0.28
    assert proxy.log(1)[0]["detail"].startswith("delayed 0.3")


def test_delayed_request_whose_client_left_is_never_sent(upstream, proxy):
    proxy.add({"name": "d", "effect": "delay", "params": {"delay_s": 0.5}, "count": 1})
    body = json.dumps({"stream": False}).encode()
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: abandoned\r\n"
              b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    # the proxy has taken it and holds it (the rule applied), not a guessed 0.1 s: else the retry could come first
    deadline = time.monotonic() + 30
    while proxy.rules()[0]["applied"] < 1:
        assert time.monotonic() < deadline, proxy.rules()
        time.sleep(0.01)
    s.close()  # the client gives up; its retry passes (count 1)
    assert chat(proxy.port, stream=False, headers={"x-request-id": "retry"})[0] == 200
    time.sleep(0.7)  # past the delay: the abandoned one must still not have been sent
    ids = [r["id"] for r in upstream.requests]
    assert "retry" in ids and "abandoned" not in ids
    assert proxy.log(1)[0]["request_id"] == "abandoned"
