"""The listening side the gateway and the LLM fault proxy share (chaos/http1/server.py on wire.py), on a
real socket over loopback: pipelined requests answered in order, a chunked body's bytes past its end left for the
next request, a 413 the client can read after sending its whole body, a stream chunked to HTTP/1.1 and to the
close for HTTP/1.0, and a request's task cancelled the moment its client leaves."""

import asyncio
import socket

import pytest

from chaos.http1.server import Server, StreamOut, linger, read_whole, send
from chaos.http1.wire import HTTPError, body_framing, iter_body


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def _serve(handler):
    server = Server(handler, header_timeout=5, idle_s=5)
    port = await server.start("127.0.0.1", 0)
    return server, port


async def _exchange(port: int, data: bytes, until: bytes | None = None, half_close: bool = False) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(data)
    if half_close:
        w.write_eof()
    out = b""
    while (until is None or until not in out) and (piece := await r.read(65536)):
        out += piece
    w.close()
    return out


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_pipelined_chunked_requests_are_answered_in_order():
    seen = []

    async def echo(reader, writer, head):
        body = await read_whole(reader, body_framing(head, True), 1024, 5)
        seen.append(body)
        await send(writer, 200, body or b"", keep=True, content_type="text/plain")
        return True

    async def main():
        server, port = await _serve(echo)
        try:
            one = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            two = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz"
            return await _exchange(port, one + two)  # one write: the first body's read takes the second head too
        finally:
            await server.close()

    out = run(main())
    assert seen == [b"abcde", b"xyz"]
    assert out.index(b"\r\n\r\nabcde") < out.index(b"\r\n\r\nxyz") and out.count(b"HTTP/1.1 200") == 2


def test_iter_body_refuses_a_chunk_past_the_limit_before_reading_it():
    async def main():
        r = asyncio.StreamReader()
        r.feed_data(b"4\r\nabcd\r\nffffffff\r\n")  # the second chunk says 4 GB; none of it was sent
        with pytest.raises(HTTPError) as e:
            async for _ in iter_body(r, ("chunked", 0), request=True, limit=1 << 20):
                pass
        return e.value.status

    assert run(main()) == 413


def test_a_refused_body_is_read_and_dropped_so_the_client_sees_the_413():
    async def refuse(reader, writer, head):
        await send(writer, 413, b'{"error": {}}', keep=False)
        await linger(reader)
        return False

    def client(port):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (8 << 20) + b"a" * (8 << 20))
            return s.recv(65536)  # a reset here (the server closed on unread bytes) fails the test

    async def main():
        server, port = await _serve(refuse)
        try:
            return await asyncio.to_thread(client, port)
        finally:
            await server.close()

    assert run(main()).startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_a_stream_is_chunked_to_http11_and_ends_with_the_close_for_http10(version):
    async def stream(reader, writer, head):
        out = StreamOut(writer, 200, [("Content-Type", "text/event-stream")], head.first[2], keep=True)
        await out.write(b"data: 1\n\n")
        await out.write_eof(b"data: [DONE]\n\n")
        return out.chunked

    async def main():
        server, port = await _serve(stream)
        try:
            return await _exchange(port, f"GET / {version}\r\nHost: x\r\n\r\n".encode(),
                                   until=b"0\r\n\r\n" if version == "HTTP/1.1" else None)
        finally:
            await server.close()

    out = run(main())
    head, _, body = out.partition(b"\r\n\r\n")
    if version == "HTTP/1.1":
        assert b"Transfer-Encoding: chunked" in head and b"Connection: close" not in head
        assert body == b"9\r\ndata: 1\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    else:
        assert b"Transfer-Encoding" not in head and b"Connection: close" in head
        assert body == b"data: 1\n\ndata: [DONE]\n\n"  # read to the close: the server closed after it


def test_a_client_that_leaves_cancels_its_request():
    async def main():
        done, started = asyncio.Event(), asyncio.Event()

        async def slow(reader, writer, head):
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                done.set()
                raise
            return True

        server, port = await _serve(slow)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await started.wait()
            w.close()
            await asyncio.wait_for(done.wait(), 10)
            return True
        finally:
            await server.close()

    assert run(main())
