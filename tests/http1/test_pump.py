"""The pump (chaos/http1/pump.py) on real loopback sockets, on asyncio's loop and on uvloop: a body passed on
from the transport's reads in order, whatever its framing; the connection handed back for reuse with what was
sent beyond the body; a cut, a reset, bad framing and silence reported as the upstream's; a full sink's side
pausing the upstream's reads until it drains."""

import asyncio
import importlib.util
import socket
import struct
import time

import pytest

from chaos.http1.wire import HTTPError, body_framing, read_head
from chaos.http1.pump import Pump, StreamIdle

LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(params=LOOPS)
def run(request):
    def go(coro):
        factory = None
        if request.param == "uvloop":
            import uvloop
            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(asyncio.wait_for(coro, 30))
    return go


def two_events_then_silence(stall_s: float):
    async def script(r, w):
        w.write(SSE_HEAD + chunked(b"data: 0\n\n")[0])
        await asyncio.sleep(0.05)
        w.write(chunked(b"data: 1\n\n")[0])
        await asyncio.sleep(stall_s)
    return script


def chunked(*events: bytes) -> list[bytes]:
    return [b"%x\r\n%b\r\n" % (len(e), e) for e in events]


async def upstream(script):
    """A server whose one connection is driven by script(reader, writer) after the request head arrives."""
    async def on_conn(r, w):
        await r.readuntil(b"\r\n\r\n")
        try:
            await script(r, w)
        finally:
            w.close()
    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def open_body(port):
    """(reader, writer, head, framing) once the answer's head is in."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    head = await read_head(r, False)
    return r, w, head, body_framing(head, False, "POST")


class Sink:
    def __init__(self, full_after: int | None = None):
        self.got: list[tuple[bytes, bool, float]] = []
        self.full_after = full_after

    def __call__(self, data, ended):
        self.got.append((data, ended, time.monotonic()))
        return self.full_after is not None and len(self.got) >= self.full_after

    @property
    def data(self) -> bytes:
        return b"".join(d for d, _, _ in self.got)


async def noop_drain():
    return None


def test_a_chunked_stream_passes_in_order_and_the_connection_is_reused(run):
    events = [b"data: %d\n\n" % i for i in range(6)]

    async def script(r, w):
        w.write(SSE_HEAD + chunked(events[0])[0])  # the first event comes with the head
        for piece in chunked(*events[1:]):
            await asyncio.sleep(0.02)
            w.write(piece)
        # the end of the body and the next answer's head in one write: the pump must stop at the body's end
        w.write(b"0\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
        await r.read(1)

    async def main():
        server, port = await upstream(script)
        r, w, head, framing = await open_body(port)
        own = w.transport.get_protocol()
        pump = Pump(r, w, framing)
        assert w.transport.get_protocol() is pump
        first, ended = await pump.first()
        assert first == events[0] and not ended
        sink = Sink()
        pump.attach(sink)
        assert await pump.run(noop_drain) is None
        assert sink.data == b"".join(events[1:]) and sink.got[-1][1]
        assert len(sink.got) >= 3  # passed on as they came, not at the end
        assert w.transport.get_protocol() is own  # handed back, with the bytes beyond the body
        nxt = await read_head(r, False)
        assert nxt.first[1] == "204"
        w.close()
        server.close()
    run(main())


@pytest.mark.parametrize("framing", ["length", "close"])
def test_length_and_close_bodies(run, framing):
    body = b"x" * 100_000

    async def script(r, w):
        if framing == "length":
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body))
            w.write(body[:10])
            await asyncio.sleep(0.02)
            w.write(body[10:] + b"EXTRA")  # beyond the body: left in the reader
            await r.read(1)
        else:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body[:10])
            await asyncio.sleep(0.02)
            w.write(body[10:])

    async def main():
        server, port = await upstream(script)
        r, w, head, fr = await open_body(port)
        assert fr[0] == framing
        pump = Pump(r, w, fr)
        first, ended = await pump.first()
        sink = Sink()
        pump.attach(sink)
        assert await pump.run(noop_drain) is None
        assert first + sink.data == body and sink.got[-1][1]
        if framing == "length":
            assert await r.readexactly(5) == b"EXTRA"
        w.close()
        server.close()
    run(main())


@pytest.mark.parametrize("how", ["fin", "reset", "bad-framing"])
def test_a_broken_body_is_the_upstreams_failure(run, how):
    async def script(r, w):
        w.write(SSE_HEAD + chunked(b"data: 0\n\n")[0])
        await asyncio.sleep(0.05)
        if how == "bad-framing":
            w.write(b"zz\r\n")
            await r.read(1)
        elif how == "reset":
            w.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                             struct.pack("ii", 1, 0))
            w.transport.abort()

    async def main():
        server, port = await upstream(script)
        r, w, head, fr = await open_body(port)
        pump = Pump(r, w, fr)
        assert (await pump.first())[0] == b"data: 0\n\n"
        pump.attach(Sink())
        failed = await pump.run(noop_drain)
        kind = {"fin": asyncio.IncompleteReadError, "reset": ConnectionResetError, "bad-framing": HTTPError}[how]
        assert isinstance(failed, kind), failed
        w.close()
        server.close()
    run(main())


def test_a_failure_before_any_payload_is_raised_by_first(run):
    async def script(r, w):
        w.write(SSE_HEAD)
        await asyncio.sleep(0.05)

    async def main():
        server, port = await upstream(script)
        r, w, head, fr = await open_body(port)
        pump = Pump(r, w, fr)
        with pytest.raises(asyncio.IncompleteReadError):
            await pump.first()
        w.close()
        server.close()
    run(main())


def test_silence_ends_the_run_but_a_full_sinks_wait_does_not_count(run):
    async def main():
        server, port = await upstream(two_events_then_silence(5))
        r, w, head, fr = await open_body(port)
        pump = Pump(r, w, fr)
        await pump.first()
        sink = Sink(full_after=1)  # full at its first batch: the pump waits for drain, 0.6 s
        drained = []

        async def slow_drain():
            await asyncio.sleep(0.6)
            drained.append(time.monotonic())

        t0 = time.monotonic()
        pump.attach(sink, idle_s=0.4)
        failed = await pump.run(slow_drain)
        took = time.monotonic() - t0
        assert isinstance(failed, StreamIdle), failed
        assert drained  # the idle limit (0.4 s) did not end the 0.6 s wait for the sink's side
        assert took >= 0.6 + 0.4 - 0.05  # silence counted only from the drain's end
        assert sink.data == b"data: 1\n\n"
        w.close()
        server.close()
    run(main())


def test_a_full_sink_pauses_the_upstreams_reads_until_it_drains(run):
    events = [b"data: %d\n\n" % i for i in range(20)]

    async def script(r, w):
        w.write(SSE_HEAD)
        for piece in chunked(*events):
            w.write(piece)
            await asyncio.sleep(0.01)
        w.write(b"0\r\n\r\n")
        await r.read(1)

    async def main():
        server, port = await upstream(script)
        r, w, head, fr = await open_body(port)
        pump = Pump(r, w, fr)
        first, _ = await pump.first()
        sink = Sink(full_after=1)
        release = asyncio.Event()
        calls_while_blocked = []

        async def drain():
            await asyncio.sleep(0.3)  # the upstream sends ~all its events meanwhile
            calls_while_blocked.append(len(sink.got))
            sink.full_after = None
            release.set()

        pump.attach(sink)
        assert await pump.run(drain) is None
        assert calls_while_blocked == [1]  # nothing was read while the sink's side was full
        assert first + sink.data == b"".join(events)
        w.close()
        server.close()
    run(main())


def test_what_a_sink_raises_is_raised_by_run(run):
    def sink(data, ended):
        raise ConnectionResetError("the client left")

    async def main():
        server, port = await upstream(two_events_then_silence(1))
        r, w, head, fr = await open_body(port)
        pump = Pump(r, w, fr)
        await pump.first()
        pump.attach(sink)
        with pytest.raises(ConnectionResetError, match="client left"):
            await pump.run(noop_drain)
        w.close()
        server.close()
    run(main())
