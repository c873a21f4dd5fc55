"""One harness for what a relay adds to a token stream (the gateway, the LLM fault proxy, a Toxiproxy server), so
that every bench of a relay measures the relay and not its own client (not a benchmark itself).

- The upstream is an asyncio Protocol in its own process: each POST is answered with a chunked SSE stream, the
  first event after --first-ms, then --events - 1 more --gap-ms apart, on timers set from the request's arrival
  (no drift); a POST with "stream": false gets a small JSON answer at once, one with "big_mb": N a body of N MiB;
  GET /health and /v1/models answer at once.
- The client is an asyncio Protocol too, one keep-alive connection per stream: it parses nothing, it stamps each
  read and counts the events in it. Events a read brings together count a gap of 0 (they did arrive together).
  The former benches parsed every chunk with StreamReader.readuntil or aiohttp's line iterator: at 50 and 200
  streams on 2 cores that client was the busiest process of the three, and what it added to its own timings
  differed by path (BENCHMARKS section 8 read +6.8 ms at 50 streams where this client reads +0.85).
- Rounds alternate direct and relayed (the order flips every round), each path gets the same streams, and a
  figure is the median over rounds of (relayed - direct) of that round's percentile: the machine's drift falls
  out of each difference.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

EVENT = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'
DONE = b"data: [DONE]\n\n"
_FRAME = b"%x\r\n%b\r\n" % (len(EVENT), EVENT)
_LAST = b"%x\r\n%b\r\n0\r\n\r\n" % (len(DONE), DONE)
_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
_MODELS = b'{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench"}]}'
_CLEN = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


# -- the upstream (its own process) ------------------------------------------------------------------------

class _Upstream(asyncio.Protocol):
    def __init__(self, first: float, gap: float, events: int):
        self.first, self.gap, self.events = first, gap, events
        self.buf = b""
        self.t = None

    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            m = _CLEN.search(self.buf, 0, end + 2)
            size = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + size:
                return
            head, body = self.buf[:end], self.buf[end + 4:end + 4 + size]
            self.buf = self.buf[end + 4 + size:]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes):
        if head.startswith(b"POST") and b'"big_mb"' in body:  # a large plain body: throughput
            n = json.loads(body)["big_mb"] << 20
            self._send(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n"
                       % n)
            block = b"x" * (1 << 20)
            for _ in range(n >> 20):
                self._send(block)  # the transport buffers; the client reads as fast as it can
            return
        if head.startswith(b"POST") and b'"stream": false' not in body and b'"stream":false' not in body:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            loop.call_at(t0 + self.first, self._send, _SSE_HEAD + _FRAME)
            for i in range(1, self.events - 1):
                loop.call_at(t0 + self.first + i * self.gap, self._send, _FRAME)
            loop.call_at(t0 + self.first + (self.events - 1) * self.gap, self._send, _FRAME + _LAST)
            return
        body = _MODELS if b" /v1/models" in head[:40] else b"{}"
        self._send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                   % (len(body), body))

    def _send(self, data: bytes):
        if not self.t.is_closing():
            self.t.write(data)


async def _serve_upstream(first: float, gap: float, events: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Upstream(first, gap, events), "127.0.0.1", 0, backlog=2048)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def start_upstream(first_ms: float, gap_ms: float, events: int) -> tuple[subprocess.Popen, int]:
    return spawn([sys.executable, os.path.abspath(__file__), "upstream", str(first_ms), str(gap_ms), str(events)],
                 r"PORT (\d+)")


# -- the floor: a bare relay ---------------------------------------------------------------------------------

class _Copy(asyncio.Protocol):
    """One side of a bare relay: what it reads goes to the other side's transport, nothing more (no parsing, no
    flow control: the bench's streams are small). What any relay written in Python pays on this machine: the
    wake-ups, a read and a write per hop, the event loop's own turn."""

    def __init__(self, up_port: int | None = None):
        self.t = self.other = None
        self.held: list[bytes] = []  # what the client sent before the upstream connection was made
        self.up_port = up_port

    def connection_made(self, transport):
        self.t = transport
        if self.up_port is not None:  # a client's side: dial the upstream
            asyncio.get_running_loop().create_task(self._dial())

    async def _dial(self):
        try:
            _, up = await asyncio.get_running_loop().create_connection(_Copy, "127.0.0.1", self.up_port)
        except OSError:
            self.t.close()
            return
        up.other, self.other = self, up
        for data in self.held:
            up.t.write(data)
        self.held = []

    def data_received(self, data):
        if self.other is None:
            self.held.append(data)
        else:
            self.other.t.write(data)

    def connection_lost(self, exc):
        if self.other is not None:
            self.other.t.close()


async def _serve_floor(up_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Copy(up_port), "127.0.0.1", 0, backlog=2048)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


def start_floor(up_port: int, loop: str) -> tuple[subprocess.Popen, int]:
    """A bare relay in front of up_port, on loop (asyncio or uvloop): the floor under every relay in Python."""
    return spawn([sys.executable, os.path.abspath(__file__), "floor", str(up_port)], r"PORT (\d+)",
                 env=loop_env(loop))


# -- the client --------------------------------------------------------------------------------------------

class _Stream(asyncio.Protocol):
    """One keep-alive connection; request() sends one streamed request and returns (TTFT, gaps)."""

    def __init__(self, request: bytes):
        self.request = request
        self.t = None
        self.done: asyncio.Future | None = None
        self.t0 = self.first = self.last = 0.0
        self.gaps: list[float] = []
        self.tail = b""
        self.lost = None

    def connection_made(self, transport):
        self.t = transport

    def connection_lost(self, exc):
        self.lost = exc or ConnectionResetError("closed by the server")
        if self.done is not None and not self.done.done():
            self.done.set_exception(self.lost)

    def data_received(self, data):
        now = time.perf_counter()
        n = data.count(b"data: {")
        if n:
            if not self.first:
                self.first = now
                n -= 1
            else:
                self.gaps.append(now - self.last)
                n -= 1
            self.gaps.extend([0.0] * n)
            self.last = now
        window = self.tail + data
        self.tail = window[-16:]
        if b"[DONE]" in window and self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def stream(self) -> tuple[float, list[float]]:
        self.done = asyncio.get_running_loop().create_future()
        self.first, self.gaps, self.tail = 0.0, [], b""
        self.t0 = time.perf_counter()
        self.t.write(self.request)
        await self.done
        return self.first - self.t0, self.gaps


def chat_request(host: str = "bench", path: str = "/v1/chat/completions") -> bytes:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24,
                       "stream": True}).encode()
    return (b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (path.encode(), host.encode(), len(body), body))


async def open_streams(port: int, n: int, request: bytes) -> list[_Stream]:
    loop = asyncio.get_running_loop()
    out = []
    for _ in range(n):
        _, proto = await loop.create_connection(lambda: _Stream(request), "127.0.0.1", port)
        out.append(proto)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


async def one_round(streams: list[_Stream], per_stream: int, stagger_s: float = 0.0, seed: int = 0) -> dict:
    """per_stream requests on each stream, one after another. stagger_s: each stream starts after a random
    delay up to it (the same delays for every path of a round), so N streams are N in flight with their
    arrivals spread, as a service sees them; 0 sends every stream's first request in the same instant."""
    import random

    ttft, gaps = [], []
    delays = random.Random(seed).sample(range(len(streams)), len(streams))

    async def run(s, i):
        if stagger_s:
            await asyncio.sleep(stagger_s * delays[i] / len(streams))
        for _ in range(per_stream):
            t, g = await s.stream()
            ttft.append(t)
            gaps.extend(g)

    await asyncio.gather(*(run(s, i) for i, s in enumerate(streams)))
    return {"ttft50": pct(ttft, .5), "ttft99": pct(ttft, .99), "itl50": pct(gaps, .5), "itl99": pct(gaps, .99),
            "n": len(ttft)}


async def compare(ports: dict[str, int], levels: list[tuple[int, int]], rounds: int, request: bytes,
                  progress=None, stagger_s: float = 0.0) -> dict:
    """{(path, streams): [one_round results]}, paths interleaved every round, 'direct' first on even rounds.
    stagger_s: see one_round (a single stream is never staggered)."""
    names = list(ports)
    conns = {(n, c): await open_streams(ports[n], c, request) for n in names for c, _ in levels}
    for (n, c), streams in conns.items():  # warm every connection (and the relays' upstream pools)
        await one_round(streams, 1)
    out: dict = {key: [] for key in conns}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for c, per in levels:
            for n in order:
                out[(n, c)].append(await one_round(conns[(n, c)], per, stagger_s if c > 1 else 0.0, seed=r))
        if progress:
            progress(f"round {r + 1}/{rounds} done")
    for streams in conns.values():
        for s in streams:
            s.t.close()
    return out


def added(results: dict, path: str, streams: int, key: str, base: str = "direct") -> float:
    """Median over rounds of (path - base) of one round's figure, in ms."""
    return statistics.median((a[key] - b[key]) * 1000 for a, b in
                             zip(results[(path, streams)], results[(base, streams)]))


def median_of(results: dict, path: str, streams: int, key: str) -> float:
    return statistics.median(r[key] for r in results[(path, streams)]) * 1000


# -- processes ------------------------------------------------------------------------------------------------

def spawn(cmd: list[str], pattern: str, env: dict | None = None, timeout: float = 30,
          cwd: str | None = None) -> tuple[subprocess.Popen, int]:
    """Start cmd (in cwd, the checkout by default) and read its output until pattern's group 1 (a port) shows; the
    process keeps running."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env=env, cwd=cwd or ROOT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        m = re.search(pattern, line)
        if m:
            return p, int(m.group(1))
    p.kill()
    raise RuntimeError(f"{' '.join(cmd)} did not start")


def stop(procs: list[subprocess.Popen]) -> None:
    """Each process this bench started (each leads a session of its own), its group with it: SIGTERM, then SIGKILL
    after 5 s (chaos.common.stop_group)."""
    from chaos.common import stop_group

    for p in procs:
        stop_group(p.pid, None, grace=5.0, proc=p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def tree_name(tree: str) -> str:
    """A checkout's short commit (what a --baseline is), or its folder's name."""
    try:
        return subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.path.basename(os.path.abspath(tree))


def loop_env(loop: str) -> dict:
    """The environment that starts a relay on the given event loop (chaos.common.run_event_loop reads it)."""
    return {**os.environ, "CHAOS_EVENT_LOOP": loop}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__" and sys.argv[1:2] == ["upstream"]:
    first_ms, gap_ms, events = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    asyncio.run(_serve_upstream(first_ms / 1000, gap_ms / 1000, events))
elif __name__ == "__main__" and sys.argv[1:2] == ["floor"]:
    if os.environ.get("CHAOS_EVENT_LOOP") == "uvloop":  # as chaos.common.run_event_loop would, without chaos
        import uvloop
        uvloop.run(_serve_floor(int(sys.argv[2])))
    else:
        asyncio.run(_serve_floor(int(sys.argv[2])))
