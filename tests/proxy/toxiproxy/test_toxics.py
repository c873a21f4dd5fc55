"""Each toxic on real traffic through the proxy: what a client of the service behind it measures."""

from __future__ import annotations

import errno
import socket
import statistics
import time

import pytest

from .support import HttpConn, addr, median


def _conn(p) -> HttpConn:
    return HttpConn(addr(p["listen"])[1])


def test_plain_relay_keep_alive_and_download(engine, upstream):
    c = _conn(engine.proxy(upstream.http_port))
    try:
        assert [c.get() for _ in range(20)] == [b"ok"] * 20
        assert c.get("/bytes/3000000") == b"x" * 3000000
    finally:
        c.close()


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_adds_its_delay_to_every_request(engine, upstream, stream):
    p = engine.proxy(upstream.http_port)
    c = _conn(p)
    try:
        base = median([c.timed_get() for _ in range(10)])
        engine.toxic(p["name"], type="latency", stream=stream, attributes={"latency": 100})
        added = median([c.timed_get() for _ in range(7)]) - base
        assert 85 <= added <= 140, added
    finally:
        c.close()


def test_latency_jitter_spreads_uniformly(engine, upstream):
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="latency", attributes={"latency": 100, "jitter": 20})
    c = _conn(p)
    try:
        times = [c.timed_get() for _ in range(25)]
    finally:
        c.close()
    # uniform in [80, 120): sd ~11.5. A busy box only adds, so the floor is firm; the top is judged on the median
    # (a neighbour took one sample to 163 ms beside the engine tier), which no handful of stalls moves past 120
    assert min(times) >= 78 and statistics.median(times) < 120, times
    assert statistics.pstdev(times) >= 5, times
    assert sum(80 <= t < 125 for t in times) >= len(times) * 0.8, times  # spread over the range, not piled up


def test_latency_shifts_a_stream_without_stretching_it(engine, upstream):
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="latency", attributes={"latency": 100})
    s = socket.create_connection(addr(p["listen"]), timeout=10)
    try:
        t0 = time.perf_counter()
        s.sendall(b"GET /sse/20/10 HTTP/1.1\r\nHost: t\r\n\r\n")
        first = None
        data = b""
        while chunk := s.recv(65536):
            first = first or time.perf_counter()
            data += chunk
        end = time.perf_counter()
    finally:
        s.close()
    assert data.count(b"data: ") == 20
    assert 85 <= (first - t0) * 1000 <= 180
    # 20 events 10 ms apart take ~200 ms upstream; shifted by 100 ms they still span ~200 ms, not 20 x 100
    assert (end - first) * 1000 <= 450


def test_latency_delays_a_large_download_without_capping_it(engine, upstream):
    """A delay is not a bandwidth limit: the real server pipelines delayed chunks (its latency toxic buffers
    1,024 of them), so after the first byte a download runs at full speed. Holding 1 MiB while it waited, the
    bundled one passed about 1 MiB per latency period: 8 MB through 1 s of latency took 5.0 s after its first byte."""
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="latency", attributes={"latency": 1000})
    s = socket.create_connection(addr(p["listen"]), timeout=30)
    size, got = 8_000_000, 0
    try:
        t0 = time.perf_counter()
        s.sendall(b"GET /bytes/%d HTTP/1.1\r\nHost: t\r\n\r\n" % size)
        head = s.recv(262144)
        first = time.perf_counter()
        got = len(head.split(b"\r\n\r\n", 1)[1])
        while got < size and (chunk := s.recv(262144)):
            got += len(chunk)
        end = time.perf_counter()
    finally:
        s.close()
    assert got == size
    assert 0.95 <= first - t0 <= 2.0, first - t0  # the delay itself
    assert end - first <= 3.0, end - first  # the old cap: 5.0 s


def test_bandwidth_caps_throughput(engine, upstream):
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="bandwidth", attributes={"rate": 500})
    c = _conn(p)
    try:
        t0 = time.perf_counter()
        body = c.get("/bytes/1000000")
        rate = len(body) / (time.perf_counter() - t0)
    finally:
        c.close()
    assert 450_000 <= rate <= 550_000, rate  # 500 KB/s, KB = 1000 B


def test_timeout_closes_with_fin_after_the_last_chunk(engine, upstream):
    p = engine.proxy(upstream.echo_port)
    engine.toxic(p["name"], type="timeout", stream="upstream", attributes={"timeout": 300})
    s = socket.create_connection(addr(p["listen"]), timeout=5)
    try:
        t0 = time.perf_counter()
        time.sleep(0.15)
        s.sendall(b"swallowed")  # restarts the timer
        assert s.recv(100) == b""  # FIN: an orderly close, no data, no reset
        took = (time.perf_counter() - t0) * 1000
    finally:
        s.close()
    assert 150 + 270 <= took <= 150 + 300 + 200, took


def test_timeout_zero_holds_until_removed(engine, upstream):
    p = engine.proxy(upstream.echo_port)
    engine.toxic(p["name"], type="timeout", attributes={"timeout": 0})
    s = socket.create_connection(addr(p["listen"]), timeout=5)
    try:
        s.sendall(b"hello")
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):
            s.recv(100)  # held: nothing comes back, nothing closes
        engine.api("DELETE", f"/proxies/{p['name']}/toxics/timeout_downstream")
        s.settimeout(5)
        assert s.recv(100) == b""  # removing it closes what it held
    finally:
        s.close()


def test_reset_peer_resets(engine, upstream):
    p = engine.proxy(upstream.echo_port)
    engine.toxic(p["name"], type="reset_peer", attributes={"timeout": 100})
    s = socket.create_connection(addr(p["listen"]), timeout=5)
    try:
        t0 = time.perf_counter()
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError) as e:
            while s.recv(100):
                pass
        took = (time.perf_counter() - t0) * 1000
    finally:
        s.close()
    assert e.value.errno == errno.ECONNRESET and 90 <= took <= 600, took


def test_limit_data_counts_across_keep_alive_requests(engine, upstream):
    p = engine.proxy(upstream.http_port)
    # each /small response is 40 bytes: three fit in 130, the fourth is cut and the connection closed
    engine.toxic(p["name"], type="limit_data", attributes={"bytes": 130})
    c = _conn(p)
    try:
        assert [c.get() for _ in range(3)] == [b"ok"] * 3
        with pytest.raises(ConnectionError):
            c.get()
    finally:
        c.close()
    c = _conn(p)  # per connection: a new one starts from zero
    try:
        assert c.get() == b"ok"
    finally:
        c.close()


def test_slicer_splits_the_stream(engine, upstream):
    p = engine.proxy(upstream.echo_port)
    engine.toxic(p["name"], type="slicer",
                 attributes={"average_size": 100, "size_variation": 20, "delay": 2000})
    s = socket.create_connection(addr(p["listen"]), timeout=5)
    try:
        s.sendall(b"y" * 2000)
        pieces = []
        got = 0
        while got < 2000:
            d = s.recv(65536)
            assert d
            pieces.append(len(d))
            got += len(d)
    finally:
        s.close()
    # 2000 bytes in slices of 80-120 with 2 ms between: many small reads, not one
    assert len(pieces) >= 8 and max(pieces) <= 600, pieces


def test_slow_close_delays_the_close(engine, upstream):
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="slow_close", attributes={"delay": 300})
    s = socket.create_connection(addr(p["listen"]), timeout=5)
    try:
        s.sendall(b"GET /close HTTP/1.1\r\nHost: t\r\n\r\n")
        data = s.recv(65536)
        t0 = time.perf_counter()
        while chunk := s.recv(65536):
            data += chunk
        took = (time.perf_counter() - t0) * 1000
    finally:
        s.close()
    assert data.endswith(b"bye") and 250 <= took <= 700, took


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_toxicity_is_per_connection(engine, upstream):
    p = engine.proxy(upstream.http_port)
    engine.toxic(p["name"], type="latency", toxicity=0.5, attributes={"latency": 40})
    hit = 0
    for _ in range(100):
        c = _conn(p)
        try:
            hit += c.timed_get() >= 30
        finally:
            c.close()
    assert 30 <= hit <= 70, hit
    for _ in range(3):  # one keep-alive connection: every request hit or every request spared
        c = _conn(p)
        try:
            slow = [c.timed_get() >= 30 for _ in range(10)]
        finally:
            c.close()
        assert len(set(slow)) == 1, slow


def test_toxicity_zero_never_fires(engine, upstream):
    p = engine.proxy(upstream.echo_port)
    engine.toxic(p["name"], type="reset_peer", toxicity=0, attributes={"timeout": 0})
    for _ in range(10):
        s = socket.create_connection(addr(p["listen"]), timeout=5)
        try:
            s.sendall(b"ping")
            assert s.recv(10) == b"ping"
        finally:
            s.close()
