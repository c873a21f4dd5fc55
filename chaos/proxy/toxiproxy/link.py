"""One proxied TCP connection: the client side, the upstream side and a Pipe per direction.

A direction with no toxic firing on it is a plain copy: data_received writes straight to the other transport
(no task, no queue, no per-chunk await), with the kernel buffers and asyncio's flow control in between.
Only when a toxic fires on a direction does a task plan its chunks (stages.py) and write them on time.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import os
import random
import socket
import struct
import termios

from .stages import Latency, ResetPeer, Stage, new_stage
from .toxics import DOWNSTREAM, UPSTREAM

QUEUE_LIMIT = 1 << 20     # bytes a toxic direction holds before it stops reading its source
# Under latency, what the real server's latency toxic buffers (1024 chunks of up to 32 KiB): data held only
# because it is early must not stop the source, or a 100 ms latency would cap a stream at ~10 MB/s.
LATENCY_QUEUE_LIMIT = 1024 * 32 * 1024
WRITE_HIGH = 512 * 1024   # transport write buffer high-water mark


def _nodelay(transport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class Pipe:
    """One direction: reads from `src`, writes to `dst`."""

    def __init__(self, conn: "Connection", direction: str, toxics):
        self.conn = conn
        self.direction = direction
        self.loop = conn.loop
        self.src = None
        self.dst = None
        self.drawn: dict[int, Stage | None] = {}  # id(toxic) -> its stage, None if it spares this connection
        self.firing: list[Stage] = []
        self.limit = QUEUE_LIMIT
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.queued = 0
        self.task: asyncio.Task | None = None
        self.waiter: asyncio.Future | None = None
        self.changed = False
        self.eof = False
        self.done = False
        self.close_after_write = False
        self.dst_blocked = False
        self.src_paused = False
        self.sync(toxics, start=False)

    # -- toxics -------------------------------------------------------------------------------------------

    def sync(self, toxics, start: bool = True, reroll=frozenset()) -> None:
        """Match the proxy's toxics for this direction: new ones draw against their toxicity once, here, for
        this connection; removed ones stop acting (a removed timeout closes what it held, as the real one).
        Toxics in `reroll` (ids) draw again, as toxiproxy-server's do when restarted by an update or by a
        toxic added after them; one still firing keeps its state (limit_data's count, latency's order)."""
        now = self.loop.time()
        new: dict[int, Stage | None] = {}
        close = False
        for tox in toxics:
            key = id(tox)
            if key in self.drawn and key in reroll:
                fires = random.random() < tox.toxicity
                new[key] = (self.drawn[key] or new_stage(tox, now)) if fires else None
            elif key in self.drawn:
                new[key] = self.drawn[key]
            else:
                st = new_stage(tox, now) if random.random() < tox.toxicity else None
                if start and isinstance(st, ResetPeer):
                    st.fin = True
                new[key] = st
        for key, st in self.drawn.items():
            if key not in new and st is not None and st.toxic.type == "timeout":
                close = True
        self.drawn = new
        self.firing = [new[id(t)] for t in toxics if new[id(t)] is not None]
        self.limit = LATENCY_QUEUE_LIMIT if any(isinstance(st, Latency) for st in self.firing) else QUEUE_LIMIT
        self.changed = True
        if close:
            self.conn.close()
            return
        if start and self.firing and self.task is None and self.dst is not None:
            self.task = self.loop.create_task(self._run())
        self._wake()

    # -- the source side ------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.task is None and not self.firing and self.dst is not None:
            if not self.dst.is_closing():  # its peer may be gone before connection_lost has run
                self.dst.write(data)  # the fast path
            return
        self.queue.append((self.loop.time(), data))
        self.queued += len(data)
        self._update_reading()
        self._kick()

    def feed_eof(self) -> None:
        if self.task is None and not self.firing and self.dst is not None:
            self._finish_eof()
            return
        self.eof = True
        self._kick()

    def _kick(self) -> None:
        """Run the queue, once there is somewhere to send it: on uvloop a client's first bytes can come before
        the upstream is dialled (its transport reads even when paused in connection_made); Connection._dial
        starts what waited."""
        if self.dst is None:
            if self.src is not None:
                self.src.pause_reading()
            return
        if self.task is None:
            self.task = self.loop.create_task(self._run())
        else:
            self._wake()

    def set_dst_blocked(self, blocked: bool) -> None:
        self.dst_blocked = blocked
        self._update_reading()
        if not blocked:
            self._wake()

    def _update_reading(self) -> None:
        want_pause = self.dst_blocked or self.queued > self.limit
        if want_pause != self.src_paused and self.src is not None and not self.conn.closed:
            self.src_paused = want_pause
            try:
                (self.src.pause_reading if want_pause else self.src.resume_reading)()
            except (RuntimeError, AttributeError):
                pass

    def _finish_eof(self) -> None:
        self.done = True
        if self.dst is not None and not self.dst.is_closing() and self.dst.can_write_eof():
            try:
                self.dst.write_eof()  # forward the half-close: the other direction keeps flowing
            except OSError:
                pass
        self.conn.pipe_done()

    # -- the toxic path -------------------------------------------------------------------------------------

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _sleep_until(self, when: float | None) -> None:
        fut = self.loop.create_future()
        self.waiter = fut
        handle = self.loop.call_at(when, _resolve, fut) if when is not None else None
        try:
            await fut
        finally:
            self.waiter = None
            if handle is not None:
                handle.cancel()

    def _deadline(self) -> tuple[float, Stage] | None:
        best = None
        for st in self.firing:
            d = st.deadline()
            if d is not None and (best is None or d < best[0]):
                best = (d, st)
        return best

    def _fire(self, st: Stage) -> None:
        if isinstance(st, ResetPeer) and not st.fin:
            self.conn.reset()
        else:
            self.conn.close()  # timeout: FIN, not RST

    async def _run(self) -> None:
        try:
            while not self.conn.closed:
                due = self._deadline()
                if due is not None and self.loop.time() >= due[0]:
                    self._fire(due[1])
                    return
                if self.queue:
                    await self._send_one()
                    if self.close_after_write:
                        self.conn.close()
                        return
                    continue
                if self.eof:
                    delay = sum(st.eof_delay() for st in self.firing)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    self._finish_eof()
                    return
                if not self.firing:
                    self.task = None  # back to the fast path
                    return
                await self._sleep_until(due[0] if due else None)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.conn.close()

    async def _send_one(self) -> None:
        t, data = self.queue.popleft()
        self.queued -= len(data)
        self._update_reading()
        self.changed = False
        items = [(t, data)]
        for st in self.firing:
            items = st.apply(items, self)
            if not items:
                break
        for release, piece in items:
            # a toxic added or removed meanwhile releases what was planned (like an interrupted toxic)
            while not self.changed and release > self.loop.time() and not self.conn.closed:
                await self._sleep_until(release)
            while self.dst_blocked and not self.conn.closed:
                await self._sleep_until(None)
            if self.conn.closed or self.dst.is_closing():
                return
            self.dst.write(piece)


def _discard_unread(transport, most: int = 4 << 20) -> None:
    """Read and drop what the peer sent that nobody read (while a toxic held the direction, or reading paused):
    Linux answers close() on a socket with unread data with RST, and the real server's clients see FIN (EOF) when
    a proxy is disabled or a toxic closes their connection."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        dup = socket.socket(fileno=os.dup(sock.fileno()))  # the transport's own socket object may not recv
    except OSError:
        return
    with dup:
        dup.setblocking(False)
        while most > 0:
            try:
                data = dup.recv(65536)
            except OSError:  # nothing more to read now, or the peer is gone
                return
            if not data:
                return
            most -= len(data)


def _unread_bytes(transport) -> int:
    """Bytes in the transport's socket that nobody has read (FIONREAD); 0 where that cannot be told."""
    sock = transport.get_extra_info("socket")
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except (AttributeError, OSError, ValueError):
        return 0


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class Connection:
    """A client connection accepted by a proxy and the upstream connection dialled for it."""

    def __init__(self, proxy, client_transport):
        self.proxy = proxy
        self.loop = asyncio.get_running_loop()
        self.client = client_transport
        self.upstream = None
        self.closed = False
        self.up = Pipe(self, UPSTREAM, proxy.toxics_in(UPSTREAM))
        self.down = Pipe(self, DOWNSTREAM, proxy.toxics_in(DOWNSTREAM))
        self.up.src = self.down.dst = client_transport
        self.dial_task: asyncio.Task | None = None

    def start(self) -> None:
        _nodelay(self.client)
        self.client.set_write_buffer_limits(high=WRITE_HIGH)
        self.client.pause_reading()  # nothing is read until the upstream answers
        self.dial_task = self.loop.create_task(self._dial())

    async def _dial(self) -> None:
        host, port = self.proxy.upstream_addr()
        try:
            transport, _ = await self.loop.create_connection(lambda: UpstreamSide(self), host, port)
        except (OSError, ValueError):
            # Accepted, then closed unread, as by toxiproxy-server, which reads nothing of a client before its
            # upstream answers: a client that sent its request by then gets RST (Linux's answer to closing over
            # unread data), one that sent nothing FIN. uvloop may have read the request already: held here, it
            # counts as unread.
            if self.up.queued or _unread_bytes(self.client):
                self.reset()
            else:
                self.close()
            return
        if self.closed:
            transport.close()
            return
        self.upstream = transport
        _nodelay(transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        self.up.dst = self.down.src = transport
        for pipe in (self.up, self.down):
            if (pipe.firing or pipe.queue or pipe.eof) and pipe.task is None:
                pipe.task = self.loop.create_task(pipe._run())
        self.client.resume_reading()

    def toxics_changed(self, direction: str, reroll=frozenset()) -> None:
        if not self.closed:
            (self.up if direction == UPSTREAM else self.down).sync(self.proxy.toxics_in(direction), reroll=reroll)

    def pipe_done(self) -> None:
        if self.up.done and self.down.done:
            self.close()

    def close(self) -> None:
        """Close both sides with FIN: what the peers sent that was not read yet is dropped first, as the real
        server's links read each side as data comes (a toxic holding a direction only holds what was read)."""
        if self.closed:
            return
        self.closed = True
        for t in (self.client, self.upstream):
            if t is not None:
                _discard_unread(t)
                t.close()
        self._finish()

    def reset(self) -> None:
        """Close both sides with RST (SO_LINGER 0) instead of FIN."""
        if self.closed:
            return
        self.closed = True
        for t in (self.client, self.upstream):
            if t is None:
                continue
            sock = t.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            t.abort()
        self._finish()

    def _finish(self) -> None:
        me = asyncio.current_task()
        for task in (self.dial_task, self.up.task, self.down.task):
            if task is not None and task is not me and not task.done():
                task.cancel()
        self.proxy.connections.discard(self)


class ClientSide(asyncio.Protocol):
    def __init__(self, proxy):
        self.proxy = proxy
        self.conn: Connection | None = None

    def connection_made(self, transport):
        self.conn = Connection(self.proxy, transport)
        self.proxy.connections.add(self.conn)
        self.conn.start()

    def data_received(self, data):
        self.conn.up.feed(data)

    def eof_received(self):
        self.conn.up.feed_eof()
        return True  # keep the transport: the response may still come back

    def pause_writing(self):
        self.conn.down.set_dst_blocked(True)

    def resume_writing(self):
        self.conn.down.set_dst_blocked(False)

    def connection_lost(self, exc):
        if self.conn is not None:
            self.conn.close()


class UpstreamSide(asyncio.Protocol):
    def __init__(self, conn: Connection):
        self.conn = conn

    def data_received(self, data):
        self.conn.down.feed(data)

    def eof_received(self):
        self.conn.down.feed_eof()
        return True

    def pause_writing(self):
        self.conn.up.set_dst_blocked(True)

    def resume_writing(self):
        self.conn.up.set_dst_blocked(False)

    def connection_lost(self, exc):
        self.conn.close()
