"""The gateway's edge, against a real gateway process in front of a stub upstream process that counts what
reached it: every error the gateway emits is OpenAI-shaped with the right status, bodies are bounded in size
and time before anything is forwarded, and the gateway stays responsive while big bodies arrive."""

import json
import socket
import threading
import time

import psutil
import pytest

from chaos.reference.launcher import start_gateway

from ..http_util import conn, post, request
from .stub import Stub
from .util import BODY, gateway_args, state

MB = 2**20


@pytest.fixture(scope="module")
def edge():
    """One stub upstream and one gateway in front of it, shared by the module's tests (none changes them)."""
    with Stub(name="s0") as s0:
        gw = start_gateway([], args=gateway_args({"s0": s0.url}, header_timeout_s=1.5, body_timeout_s=1.5,
                                                            retry_after_s=2.5))
        try:
            yield gw, s0
        finally:
            gw.stop()


def shaped(status, headers, body, code):
    assert headers["content-type"].startswith("application/json"), headers
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == code, body
    assert body["error"]["message"] and headers["x-served-by"] == "gateway"


NESTED = b'{"model": "m", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
CASES = {  # name: (method, path, raw body, content type, status, code)
    "unknown route": ("GET", "/v1/nope", None, "application/json", 404, "not_found"),
    "wrong method": ("DELETE", "/v1/completions", None, "application/json", 405, "method_not_allowed"),
    "malformed JSON": ("POST", "/v1/completions", b'{"model": ', "application/json", 400, "invalid_json"),
    "not an object": ("POST", "/v1/completions", b"[1, 2]", "application/json", 400, "invalid_json"),
    "not UTF-8": ("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', "application/json", 400, "invalid_json"),
    "nested 100000 deep": ("POST", "/v1/chat/completions", NESTED, "application/json", 400, "invalid_json"),
    "text/plain body": ("POST", "/v1/completions", json.dumps(BODY).encode(), "text/plain", 400,
                        "invalid_content_type"),
    "no content type": ("POST", "/v1/completions", json.dumps(BODY).encode(), "", 400, "invalid_content_type"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_error_the_gateway_emits_is_openai_shaped(edge, case):
    gw, s0 = edge
    method, path, raw, ctype, want, code = CASES[case]
    before = s0.stats()["requests"]
    status, headers, body = request(gw.base_url, method, path, raw=raw, headers={"Content-Type": ctype})
    assert status == want, (status, body)
    shaped(status, headers, body, code)
    if want == 405:
        assert headers["allow"] == "POST"  # RFC 9110: a 405 says what the route takes
    assert s0.stats()["requests"] == before  # decided at the edge: nothing was forwarded
    assert post(gw.base_url, "/v1/completions", BODY)[0] == 200  # and the gateway serves on


def test_the_gateway_publishes_its_openapi_document(edge):
    gw, _ = edge
    status, headers, doc = request(gw.base_url, "GET", "/openapi.json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert doc["openapi"].startswith("3.1") and "/v1/chat/completions" in doc["paths"]
    assert "/gateway/state" in doc["paths"] and "413" in doc["paths"]["/v1/completions"]["post"]["responses"]


def test_retry_after_the_gateway_gives_is_rounded_up():
    # No upstream can answer: /v1/models and generation both refuse, with 2.5 s as 3 (and 2500 ms).
    gw = start_gateway([], args=gateway_args({"dead": "http://127.0.0.1:9"}, retry_after_s=2.5))
    try:
        for method, path, body in (("GET", "/v1/models", None), ("POST", "/v1/completions", BODY)):
            status, headers, got = request(gw.base_url, method, path, body)
            assert status == 503, got
            shaped(status, headers, got, "all_upstreams_unavailable")
            assert headers["retry-after"] == "3" and headers["retry-after-ms"] == "2500"
    finally:
        gw.stop()


class RSS:
    """The peak resident memory of a process while the block runs, sampled every 20 ms."""

    def __init__(self, pid):
        self.proc, self.peak, self.base = psutil.Process(pid), 0, 0
        self._stop = threading.Event()

    def __enter__(self):
        self.base = self.peak = self.proc.memory_info().rss
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)

    @property
    def grew_mb(self):
        return (self.peak - self.base) / MB


def big_body(size: int) -> bytes:
    head, tail = b'{"model": "m", "prompt": "', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_60_mb_body_is_refused_at_the_edge_with_memory_bounded(edge, framing):
    gw, s0 = edge
    before = s0.stats()
    raw = big_body(60 * MB)
    with RSS(gw.pid) as rss:
        c = conn(gw.base_url, timeout=60)
        if framing == "chunked":
            pieces = (raw[i:i + MB] for i in range(0, len(raw), MB))
            c.request("POST", "/v1/completions", body=pieces, headers={"Content-Type": "application/json"},
                      encode_chunked=True)
        else:
            c.request("POST", "/v1/completions", body=raw, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        status, headers, body = r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
        c.close()
    assert status == 413, body
    shaped(status, headers, body, "request_too_large")
    after = s0.stats()
    assert after["requests"] == before["requests"] and after["bytes"] == before["bytes"]  # no upstream saw it
    # 32 MB at most is held for a chunked body; nothing for one whose Content-Length says it all.
    assert rss.grew_mb < 150, f"the gateway's RSS grew {rss.grew_mb:.0f} MB"
    assert state(gw)["primary"]["s0"]["state"] == "up"
    assert post(gw.base_url, "/v1/completions", BODY)[0] == 200


@pytest.mark.parametrize("what", ["headers", "body"])
def test_a_request_that_trickles_gets_408_and_the_connection_is_closed(edge, what):
    gw, _ = edge
    host, port = gw.base_url.split("//")[1].split(":")
    start = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    sent = start if what == "headers" else start + b'Content-Length: 1000\r\n\r\n{"model": '
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(sent)  # ... and the rest never comes
        t0 = time.monotonic()
        reply = b""
        while piece := sock.recv(65536):  # the socket timeout bounds this: a hang fails the test
            reply += piece
        took = time.monotonic() - t0  # the gateway closed the connection
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), reply[:200]
    assert json.loads(payload)["error"]["code"] == "request_timeout"
    assert took < 10, took  # header_timeout_s and body_timeout_s are 1.5 here (10 and 30 by default)


def test_gateway_health_answers_while_big_bodies_arrive(edge):
    gw, _ = edge
    # Arrays of numbers: the most expensive JSON there is to parse (seconds for 10 MB on this box). The
    # gateway forwards them as bytes; only the replica parses them.
    raw = b'{"model": "m", "prompt": [' + b"1," * (5 * MB) + b"1]}"
    idle = max(_health_latency(gw) for _ in range(5))
    if idle > 0.5:
        pytest.skip(f"cannot judge: /health takes {idle:.2f}s on an idle gateway (the machine is overloaded)")
    results = []

    def upload():
        results.append(post(gw.base_url, "/v1/completions", raw=raw, timeout=120)[0])

    threads = [threading.Thread(target=upload) for _ in range(4)]
    for t in threads:
        t.start()
    worst = 0.0
    deadline = time.monotonic() + 60
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        worst = max(worst, _health_latency(gw))
        time.sleep(0.05)
    for t in threads:
        t.join(60)
    assert results == [200] * 4
    assert worst < 1.0, f"/health took {worst:.2f}s while bodies arrived"


def _health_latency(gw) -> float:
    t0 = time.monotonic()
    c = conn(gw.base_url, timeout=30)
    c.request("GET", "/health")
    assert c.getresponse().status == 200
    c.close()
    return time.monotonic() - t0



def _raw(gw, data: bytes, limit_s: float = 20) -> bytes:
    """data sent in one write, and all that comes back until the gateway closes the connection."""
    host, port = gw.base_url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=limit_s) as sock:
        sock.sendall(data)
        out = b""
        while piece := sock.recv(65536):  # the socket timeout bounds a hang
            out += piece
    return out


def test_head_pipelining_and_an_http10_stream_at_the_gateways_own_http_side(edge):
    """The gateway parses HTTP/1.1 itself (chaos/http1/server.py): HEAD answers a GET route's head with no body,
    two requests sent in one write are answered in order on the connection (also after a refusal that never read
    its body), a 405 names what the route allows, and an HTTP/1.0 client's stream ends with the connection's close,
    not chunked framing it cannot read."""
    gw, _ = edge
    two = _raw(gw, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    first, _, rest = two.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200") and b"Content-Length: 0" in first
    assert rest.startswith(b"HTTP/1.1 200"), two  # the HEAD sent no body: the next answer follows at once
    refused = json.dumps(BODY).encode()  # refused before it is read (text/plain), but all here: the connection serves on
    two = _raw(gw, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                   % len(refused) + refused + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert two.startswith(b"HTTP/1.1 400") and b"HTTP/1.1 200" in two, two[:400]
    assert b"Connection: close" not in two.split(b"\r\n\r\n", 1)[0]
    status, headers, body = request(gw.base_url, "POST", "/health", {"x": 1})
    assert status == 405 and headers["allow"] == "GET, HEAD", headers
    shaped(status, headers, body, "method_not_allowed")
    raw = json.dumps({**BODY, "stream": True}).encode()
    out = _raw(gw, b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(raw) + raw)
    head, _, stream = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head, out[:300]
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert stream.startswith(b"data: ") and stream.rstrip().endswith(b"data: [DONE]"), stream[-200:]
