"""Fixtures: an SSE upstream of our own (exact control of chunks and timing, and it records what it saw), the
proxy on a loop in a thread (so plain blocking clients - http.client, openai - talk to it over loopback), and
small HTTP helpers."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time

import pytest
from aiohttp import web

from chaos.proxy.llm import LLMProxy


class LoopThread:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _chunk(i: int, content: str | None = None, finish=None, usage=None, role=False) -> bytes:
    delta = {"role": "assistant", "content": ""} if role else ({} if content is None else {"content": content})
    obj = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000, "model": "m",
           "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Upstream:
    """An OpenAI-ish server: POST /v1/chat/completions (body extras n = content chunks, gap_ms, content = a fixed
    answer text), /echo (the request back), /big (bytes), /big-stream?events=N&bytes=K (an SSE stream of N events
    of K bytes, written as fast as the connection takes them; stream_write_s: how long each took). Records
    requests, peers and aborted streams."""

    def __init__(self):
        self.requests: list[dict] = []
        self.peers: set = set()
        self.aborted: list[str] = []
        self.completed: list[str] = []
        self.stream_write_s: list[float] = []
        app = web.Application()
        app.router.add_route("*", "/v1/chat/completions", self.chat)
        app.router.add_route("*", "/api/v3/chat/completions", self.chat)
        app.router.add_route("*", "/echo", self.echo)
        app.router.add_get("/big", self.big)
        app.router.add_get("/big-stream", self.big_stream)
        self.app = app

    def note(self, request: web.Request, body: bytes):
        self.peers.add(request.transport.get_extra_info("peername"))
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body,
                              "id": request.headers.get("x-request-id")})

    async def echo(self, request: web.Request):
        body = await request.read()
        self.note(request, body)
        return web.json_response({"method": request.method, "path": request.path_qs,
                                  "headers": [[k, v] for k, v in request.headers.items()], "body": body.decode()})

    async def big(self, request: web.Request):
        self.note(request, b"")
        return web.Response(body=bytes(range(256)) * (5 * 4096), content_type="application/octet-stream")

    async def big_stream(self, request: web.Request):
        self.note(request, b"")
        n, size = int(request.query["events"]), int(request.query["bytes"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        t0 = time.monotonic()
        for i in range(n):
            await resp.write(b"data: %d %s\n\n" % (i, b"x" * size))  # waits while the reader lags
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        self.stream_write_s.append(time.monotonic() - t0)
        return resp

    async def chat(self, request: web.Request):
        raw = await request.read()
        self.note(request, raw)
        body = json.loads(raw or b"{}")
        n, gap = body.get("n", 5), body.get("gap_ms", 0) / 1000
        text = body.get("content")
        pieces = [text[i:i + 4] for i in range(0, len(text), 4)] if text else [f"w{i} " for i in range(n)]
        rid = request.headers.get("x-request-id", "")
        if not body.get("stream"):
            msg = {"role": "assistant", "content": "".join(pieces)}
            if body.get("tools"):
                msg = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "f", "arguments": '{"city": "Paris"}'}}]}
            self.completed.append(rid)
            return web.json_response({"id": "chatcmpl-test", "object": "chat.completion", "created": 1700000000,
                                      "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            await resp.write(_chunk(0, role=True))
            for i, p in enumerate(pieces):
                if gap:
                    await asyncio.sleep(gap)
                await resp.write(_chunk(i, p))
            await resp.write(_chunk(0, finish="stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                await resp.write(_chunk(0, usage={"prompt_tokens": 3, "completion_tokens": len(pieces),
                                                  "total_tokens": 3 + len(pieces)}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.aborted.append(rid)
            raise
        self.completed.append(rid)
        return resp


@pytest.fixture(scope="session")
def loop_thread():
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(scope="session")
def upstream(loop_thread):
    up = Upstream()

    async def start():
        runner = web.AppRunner(up.app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = loop_thread.run(start())
    up.url = f"http://127.0.0.1:{port}"
    up.port = port
    yield up
    loop_thread.run(runner.cleanup())


class ProxyHandle:
    def __init__(self, lt: LoopThread, proxy: LLMProxy, log_path):
        self.lt, self.proxy, self.log_path = lt, proxy, log_path
        self.port = proxy.port
        self.url = f"http://127.0.0.1:{proxy.port}"

    def add(self, rule: dict) -> dict:
        status, _, body = request(self.port, "POST", "/__chaos/faults", rule)
        assert status == 201, body
        return json.loads(body)

    def remove(self, name: str) -> None:
        status, _, body = request(self.port, "DELETE", f"/__chaos/faults/{name}")
        assert status == 204, body

    def rules(self) -> list[dict]:
        return json.loads(request(self.port, "GET", "/__chaos/faults")[2])

    def log(self, wait_for: int = 0, timeout: float = 5.0) -> list[dict]:
        """The log's lines; waits (bounded) until there are at least wait_for of them."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(self.log_path) as f:
                    lines = [json.loads(x) for x in f if x.strip()]
            except FileNotFoundError:
                lines = []
            if len(lines) >= wait_for or time.monotonic() > deadline:
                return lines
            time.sleep(0.02)


@pytest.fixture
def make_proxy(loop_thread, upstream, tmp_path):
    made = []

    def make(upstream_url: str | None = None, token: str | None = None) -> ProxyHandle:
        log = tmp_path / f"faults{len(made)}.jsonl"

        async def start():
            p = LLMProxy(upstream_url or upstream.url, token=token, log_path=str(log))
            await p.start()
            return p

        p = loop_thread.run(start())
        made.append(p)
        return ProxyHandle(loop_thread, p, log)

    yield make
    for p in made:
        loop_thread.run(p.stop())


@pytest.fixture
def proxy(make_proxy) -> ProxyHandle:
    return make_proxy()


def request(port: int, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 10,
            conn: http.client.HTTPConnection | None = None):
    """(status, headers as a lower-cased dict of lists, body bytes)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    hs = {"Content-Type": "application/json", **(headers or {})}
    c.request(method, path, body=data, headers=hs)
    r = c.getresponse()
    out = r.read()
    h: dict[str, list[str]] = {}
    for k, v in r.getheaders():
        h.setdefault(k.lower(), []).append(v)
    if conn is None:
        c.close()
    return r.status, h, out


def chat(port: int, stream: bool = True, headers: dict | None = None, timeout: float = 10, **extra):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}
    return request(port, "POST", "/v1/chat/completions", body, headers, timeout)


def events(body: bytes) -> list[str]:
    """The data of each SSE event."""
    return [e[len("data: "):] for e in body.decode().split("\n\n") if e.startswith("data: ")]


def contents(body: bytes) -> list[str]:
    out = []
    for d in events(body):
        if d == "[DONE]":
            continue
        try:
            obj = json.loads(d)
        except ValueError:
            continue
        for ch in obj.get("choices", []):
            c = (ch.get("delta") or {}).get("content")
            if c:
                out.append(c)
    return out
