"""The no-fault path: bytes, framing, headers, keep-alive and the pool, disconnects, upstream failures."""

from __future__ import annotations

import http.client
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import chat, request


def _raw(port: int, req: bytes, timeout: float = 5) -> bytes:
    """Send req on a fresh socket, read until the server closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(req)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = s.recv(65536)
        if not d:
            break
        out += d
    s.close()
    return out


def test_stream_without_faults_is_relayed_byte_for_byte(upstream, proxy):
    direct = request(upstream.port, "POST", "/v1/chat/completions",
                     {"stream": True, "n": 20, "stream_options": {"include_usage": True}})
    through = chat(proxy.port, n=20, stream_options={"include_usage": True})
    assert through[0] == 200 and through[2] == direct[2]
    assert through[2].endswith(b"data: [DONE]\n\n")
    assert "x-chaos-fault" not in through[1]
    assert through[1]["transfer-encoding"] == ["chunked"]
    assert proxy.log() == []  # nothing touched, nothing logged


def test_a_client_that_stops_reading_holds_the_upstream_back_and_loses_nothing(upstream, proxy):
    # 2,000 events of 16 KB (~33 MB, more than the sockets' buffers on the way hold): while the client reads
    # nothing for 2 s, the proxy must stop reading the upstream (whose writes then wait) rather than hold the
    # stream in memory; then every event arrives, in order, and the stream ends whole.
    n, before = 2000, len(upstream.stream_write_s)
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    c.request("GET", f"/big-stream?events={n}&bytes=16384")
    resp = c.getresponse()
    time.sleep(2.0)
    got = [line.split(b" ", 2)[1] for line in resp.read().split(b"\n\n") if line]
    c.close()
    assert got[-1] == b"[DONE]" and [int(x) for x in got[:-1]] == list(range(n))
    took = upstream.stream_write_s[before:]
    assert len(took) == 1 and took[0] >= 1.0, took  # the upstream was held back while the client lagged


def test_large_content_length_body_is_identical(upstream, proxy):
    status, h, body = request(proxy.port, "GET", "/big")
    assert status == 200 and body == bytes(range(256)) * (5 * 4096)
    assert h["content-length"] == [str(len(body))]


def test_one_upstream_connection_serves_sequential_requests(upstream, proxy):
    before = set(upstream.peers)
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    for _ in range(5):
        assert request(proxy.port, "POST", "/v1/chat/completions", {"stream": True}, conn=c)[0] == 200
    c.close()
    for _ in range(3):  # new client connections: still the same upstream connection
        assert chat(proxy.port, stream=False)[0] == 200
    assert proxy.proxy.pool.opened == 1
    assert len(upstream.peers - before) == 1


def test_host_rewritten_hop_by_hop_dropped_chunked_request_body(upstream, make_proxy):
    p = make_proxy()
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    c.putrequest("POST", "/echo?x=1", skip_host=True)
    for k, v in [("Host", "example.invalid"), ("Transfer-Encoding", "chunked"), ("Connection", "keep-alive, x-secret"),
                 ("X-Secret", "s"), ("Keep-Alive", "timeout=5"), ("Proxy-Authorization", "Basic x"), ("X-Keep", "k")]:
        c.putheader(k, v)
    c.endheaders()
    for piece in (b"hello ", b"chunked ", b"world"):
        c.send(b"%x\r\n%b\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    echo = json.loads(r.read())
    got = {k.lower(): v for k, v in echo["headers"]}
    assert echo["body"] == "hello chunked world" and echo["path"] == "/echo?x=1"
    assert got["host"] == f"127.0.0.1:{upstream.port}"
    assert got["content-length"] == "19" and "transfer-encoding" not in got
    assert got["x-keep"] == "k"
    for hop in ("x-secret", "keep-alive", "proxy-authorization"):
        assert hop not in got
    # the same client connection is kept for the next request
    c.request("GET", "/big")
    assert c.getresponse().read()[:3] == b"\x00\x01\x02"
    c.close()


def test_base_path_of_upstream_is_a_prefix(upstream, make_proxy):
    p = make_proxy(upstream.url + "/api/v3/")
    status, _, body = request(p.port, "POST", "/chat/completions", {"stream": False})
    assert status == 200 and json.loads(body)["object"] == "chat.completion"
    assert upstream.requests[-1]["path"] == "/api/v3/chat/completions"


def test_connection_close_is_honoured_and_http10_gets_a_close_delimited_stream(proxy):
    out = _raw(proxy.port, b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"Connection: close" in head and len(body) == 5 * 4096 * 256
    body10 = json.dumps({"stream": True, "n": 3}).encode()
    out = _raw(proxy.port, b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%b" % (len(body10), body10))
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower() and body.endswith(b"data: [DONE]\n\n")


def test_upstream_down_is_a_502_in_openai_shape(make_proxy):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    p = make_proxy(f"http://127.0.0.1:{port}")
    status, _, body = chat(p.port)
    err = json.loads(body)["error"]
    assert status == 502 and err["type"] == "server_error" and err["code"] == "upstream_error"
    assert "failed" in err["message"]


def test_client_disconnect_mid_stream_drops_the_upstream_connection(upstream, proxy):
    assert chat(proxy.port, stream=False)[0] == 200  # one pooled connection
    opened = proxy.proxy.pool.opened
    s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    body = json.dumps({"stream": True, "n": 100, "gap_ms": 20}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: leaver\r\nContent-Length: %d\r\n\r\n%b"
              % (len(body), body))
    got = b""
    while got.count(b"data:") < 3:
        got += s.recv(4096)
    s.close()
    deadline = time.monotonic() + 3
    while "leaver" not in upstream.aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "leaver" in upstream.aborted and "leaver" not in upstream.completed
    assert len(proxy.proxy.pool.idle) == 0  # that connection was closed, not pooled
    assert chat(proxy.port, n=2)[0] == 200
    assert proxy.proxy.pool.opened == opened + 1


OK_EMPTY_JSON = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _read_request(r) -> None:
    """One request off a raw upstream connection: its head and its Content-Length body."""
    head = (await r.readuntil(b"\r\n\r\n")).lower()
    await r.readexactly(int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length" in head else 0)


def test_a_pooled_connection_the_upstream_closed_is_retried_on_a_fresh_one(loop_thread, make_proxy):
    """An upstream that closes every connection 0.2 s after answering, without saying so and without reading
    what came meanwhile: the proxy pools the connection, sends the next request on it at once, sees it die
    unanswered and sends that request again on a new one."""
    import asyncio

    async def handle(r, w):
        await _read_request(r)
        w.write(OK_EMPTY_JSON)
        await w.drain()
        await asyncio.sleep(0.2)
        w.close()

    server = loop_thread.run(asyncio.start_server(handle, "127.0.0.1", 0))
    try:
        p = make_proxy(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        for _ in range(3):
            status, _, body = chat(p.port, stream=False)
            assert (status, body) == (200, b"{}")
        assert p.proxy.pool.opened == 3  # each later request: sent on the pooled one, lost, sent again
    finally:
        time.sleep(0.3)  # the last handler's close
        server.close()


def test_the_dechunker_takes_any_split_and_refuses_bad_framing():
    import random

    from chaos.http1.wire import Dechunker, HTTPError

    body = b"5\r\nhello\r\n1;ext=1\r\n \r\n10\r\n" + b"x" * 16 + b"\r\n0\r\nTrailer: t\r\n\r\nNEXT"
    rng = random.Random(7)
    for _ in range(200):
        d, out, i = Dechunker(), [], 0
        while i < len(body):
            n = rng.randint(1, 9)
            out += d.feed(body[i:i + n])
            i += n
        assert b"".join(out) == b"hello " + b"x" * 16 and d.done and d.rest == b"NEXT"
    for bad in (b"zz\r\n", b"5\r\nhelloXX", b"1" * 17 + b"\r\n", b"9" * 20000):
        with pytest.raises(HTTPError):
            Dechunker().feed(bad)


def test_the_retry_after_a_dead_pooled_connection_takes_a_fresh_one_not_another_idle_one(loop_thread, make_proxy):
    """Found against llama-server (a 502 "the upstream closed the connection without answering" in a profile game
    day, 2026-12-07): two pooled connections gone stale together, and the retry took the second from the pool.
    Here an upstream answers the first request of each connection only and drops any later one unanswered; two
    requests at once leave two connections pooled; the third request dies on one and must not be sent on the
    other."""
    import asyncio

    both = asyncio.Event()
    accepted = []

    async def handle(r, w):
        accepted.append(w)
        if len(accepted) == 2:
            both.set()
        await _read_request(r)
        if len(accepted) <= 2:
            await asyncio.wait_for(both.wait(), 10)  # the first two answer together: two connections pooled
        w.write(OK_EMPTY_JSON)
        await w.drain()
        await r.read(1)  # a later request on this connection: dropped unanswered, as a stale keep-alive is
        w.close()

    server = loop_thread.run(asyncio.start_server(handle, "127.0.0.1", 0))
    try:
        p = make_proxy(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        with ThreadPoolExecutor(2) as ex:
            firsts = list(ex.map(lambda _: chat(p.port, stream=False), range(2)))
        assert [(s, b) for s, _, b in firsts] == [(200, b"{}")] * 2 and p.proxy.pool.opened == 2
        status, _, body = chat(p.port, stream=False)
        assert (status, body) == (200, b"{}"), body  # not a 502 from the second stale connection
        assert p.proxy.pool.opened == 3
    finally:
        server.close()
