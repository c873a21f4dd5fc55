"""A response body passed from an upstream connection to a sink as each read brings it, with no task in between.

Through a StreamReader, every relayed event costs a future, a task wake-up and a trip through an async generator
before its bytes go on; at 200 streams on asyncio's loop that machinery was about a third of the gateway's CPU
(BENCHMARKS section 5). The pump takes the connection's transport for the length of one body: the transport calls
it with each read, it takes the framing off and hands the batch to the sink there and then, and the task that owns
the request wakes once, at the end (or when the sink's side is full and must drain). After a whole body the
connection's own protocol is put back, with anything read beyond the body, so the connection can be pooled.
"""

from __future__ import annotations

import asyncio

from ..errors import ServiceError
from .wire import Dechunker, take_buffered, unread


class StreamIdle(ServiceError):
    """The upstream sent nothing for idle_s while the sink's side was ready for more."""


class Pump(asyncio.Protocol):
    """One response body, framing ('length', n), ('chunked', 0) or ('close', 0) (http1.body_framing), read off
    (reader, writer)'s connection from the moment it is made.

    first() waits for the first batch and hands it back; attach(sink) sends every later batch to
    sink(data, ended) -> full, called from the transport's read; run(drain) waits for the end. sink returns True
    when its side is full: the upstream is not read until drain() returns."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, framing: tuple[str, int]):
        self.loop = asyncio.get_running_loop()
        self.reader, self.transport = reader, writer.transport
        self.kind, self.left = framing
        self.dechunk = Dechunker() if self.kind == "chunked" else None
        self.sink = None
        self.pending: list[bytes] = []  # taken off before a sink was attached
        self.ended = False  # the last byte of the body has been taken off
        self.failed: BaseException | None = None  # what went wrong on the upstream's side
        self.sink_error: BaseException | None = None
        self.blocked = False  # the sink's side is full; the upstream's reads are paused
        self.told_end = False  # first() handed back the end of the body
        self.idle_s: float | None = None
        self.last = 0.0  # loop time of the last read (kept while an idle limit is set)
        self._idle_timer: asyncio.TimerHandle | None = None
        self._wake: asyncio.Future | None = None
        self.own = self.transport.get_protocol()  # the connection's protocol, put back after the body
        self.transport.set_protocol(self)
        if self.kind == "none" or (self.kind == "length" and self.left == 0):
            self._end(b"")
            return
        if data := take_buffered(reader):  # what came with the head
            self.data_received(data)
        if not self.done:  # the reader saw the connection end before the pump took it over
            if (exc := reader.exception()) is not None:
                self._fail(exc)
            elif reader.at_eof():
                self.eof_received()

    @property
    def waiting(self) -> bool:
        """Nothing of the body has been taken off yet, and it has not ended."""
        return not (self.pending or self.done)

    @property
    def done(self) -> bool:
        return self.ended or self.failed is not None or self.sink_error is not None

    # -- the owner's side ----------------------------------------------------------------------------
    async def first(self) -> tuple[bytes, bool]:
        """(data, ended): what arrived first, once some payload has or the body has ended. Raises what the
        upstream's side raised (IncompleteReadError, OSError, HTTPError) when it failed before any payload;
        a failure after some is run()'s to report."""
        while not (self.pending or self.done):
            await self._sleep()
        if not self.pending and self.failed is not None:
            raise self.failed
        data, self.pending = _join(self.pending), []
        self.told_end = self.ended
        return data, self.ended

    def attach(self, sink, idle_s: float | None = None) -> None:
        """From now on each batch goes to sink(data, ended) as it is read; what came since first() goes now.
        idle_s: how long the upstream may send nothing (while the sink's side is ready) before run() ends."""
        self.sink, self.idle_s = sink, idle_s
        self.last = self.loop.time()
        if self.pending or (self.ended and not self.told_end):
            data, self.pending = _join(self.pending), []
            self._give(data, self.ended)
        if idle_s is not None and not self.done:
            self._idle_timer = self.loop.call_at(self.last + idle_s, self._idle_check)

    async def run(self, drain) -> BaseException | None:
        """Wait for the end of the body: None when it came whole, else what failed on the upstream's side
        (IncompleteReadError, OSError, HTTPError, StreamIdle). What sink or drain() raised is raised."""
        try:
            while not self.done:
                if self.blocked:
                    await drain()
                    self.blocked = False
                    self.last = self.loop.time()
                    if not self.done:
                        self.transport.resume_reading()
                    continue
                await self._sleep()
        finally:
            self._stop_idle()
        if self.sink_error is not None:
            raise self.sink_error
        return self.failed

    async def _sleep(self) -> None:
        self._wake = self.loop.create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def _signal(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # -- the transport's side ------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.done:
            return
        try:
            if self.dechunk is not None:
                pieces = self.dechunk.feed(data)
                if self.dechunk.done:
                    self._take(pieces, True)
                    self._end(self.dechunk.rest)
                elif pieces:
                    self._take(pieces, False)
            elif self.kind == "length":
                body, rest = (data, b"") if len(data) < self.left else (data[:self.left], data[self.left:])
                self.left -= len(body)
                self._take([body], self.left == 0)
                if self.left == 0:
                    self._end(rest)
            else:  # close: the body is everything until the upstream's FIN
                self._take([data], False)
        except Exception as e:  # bad framing (HTTPError): the upstream's; a sink's error is kept by _give
            self._fail(e)

    def eof_received(self):
        if not self.done:
            if self.kind == "close":
                self._take([], True)
                self.ended = True
                self._signal()
            else:
                self._fail(asyncio.IncompleteReadError(b"", self.left or None))
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc) -> None:
        if not self.done:
            self._fail(exc if exc is not None else asyncio.IncompleteReadError(b"", self.left or None))
        self._stop_idle()
        self.own.connection_lost(exc)  # the reader and writer learn of it, as if they had been there

    def pause_writing(self) -> None:
        self.own.pause_writing()

    def resume_writing(self) -> None:
        self.own.resume_writing()

    # -- inside ---------------------------------------------------------------------------------------
    def _take(self, pieces: list[bytes], ended: bool) -> None:
        if self.idle_s is not None:  # only the idle check reads it
            self.last = self.loop.time()
        if self.sink is None:
            self.pending += pieces
            self.ended = ended
            if pieces or ended:
                self._signal()
            return
        self._give(_join(pieces), ended)

    def _give(self, data: bytes, ended: bool) -> None:
        try:
            full = self.sink(data, ended)
        except Exception as e:
            self.sink_error = e
            self._signal()
            return
        if full and not ended and not self.blocked:
            self.blocked = True
            self.transport.pause_reading()
            self._signal()

    def _end(self, rest: bytes) -> None:
        """The body is whole: the connection goes back to its own protocol, with what was read beyond it."""
        self.ended = True
        self.transport.set_protocol(self.own)
        if rest:
            unread(self.reader, rest)  # sent beyond its answer: Pool.get will not reuse the connection
        if self.blocked:
            self.blocked = False
            self.transport.resume_reading()
        self._stop_idle()
        self._signal()

    def _fail(self, e: BaseException) -> None:
        self.failed = e
        self._stop_idle()
        self._signal()

    def _idle_check(self) -> None:
        self._idle_timer = None
        if self.done:
            return
        now = self.loop.time()
        if self.blocked:  # a slow client's wait is not the upstream's silence
            self._idle_timer = self.loop.call_at(now + self.idle_s, self._idle_check)
        elif now - self.last >= self.idle_s - 0.001:  # a timer may fire a little early (uvloop's are in ms)
            self._fail(StreamIdle(f"nothing for {self.idle_s:g}s"))
        else:
            self._idle_timer = self.loop.call_at(self.last + self.idle_s, self._idle_check)

    def _stop_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


def to_client(write, writer: asyncio.StreamWriter):
    """A sink for Pump.attach that passes each batch to write(data, ended), which writes it to the client behind
    writer without waiting: refused (ConnectionResetError) once that client has gone, and full while writer's
    transport holds more than its high-water mark."""
    transport = writer.transport
    high = transport.get_write_buffer_limits()[1]

    def sink(data: bytes, ended: bool) -> bool:
        if transport.is_closing():
            raise ConnectionResetError("the client left")
        write(data, ended)
        return transport.get_write_buffer_size() > high

    return sink


def _join(pieces: list[bytes]) -> bytes:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
