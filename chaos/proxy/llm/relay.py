"""The upstream's answer to the client: relayed as it comes, or, when a stream or content fault applies, event
by event (SSE) or rewritten whole (a JSON answer)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from .content import apply_content
from chaos.http1.pool import UpstreamError
from chaos.http1.wire import LAST_CHUNK, HTTPError, body_framing, chunk, encode_head, iter_body, read_body
from chaos.http1.pump import Pump, to_client
from .stream import Event, StreamCtx, StreamEnd, split_events

JSON_LIMIT = 16 * 1024 * 1024  # a plain answer whose content a fault rewrites is read whole, up to this
_BROKEN = (OSError, asyncio.IncompleteReadError, HTTPError)


async def relay_response(r: asyncio.StreamReader, upstream_w: asyncio.StreamWriter, resp, method: str,
                         ex) -> tuple[bool, bool]:
    """(the upstream connection (r, upstream_w) may be reused, the client connection is kept)."""
    status = int(resp.first[1])
    try:
        framing = body_framing(resp, False, method)
    except HTTPError as e:
        raise UpstreamError(str(e)) from None
    up_keep = resp.keeps_alive(False, framing)
    ctype = (resp.get("content-type") or "").lower()
    stream_runs = [x for x in ex.runs if x.effect.kind == "stream"]
    content_runs = [x for x in ex.runs if x.effect.kind == "content"]
    for run in stream_runs:
        if run.active:
            await run.effect.on_head(run)
    if status == 200 and ctype.startswith("text/event-stream") and (stream_runs or content_runs):
        mode = "sse"
    elif status == 200 and "json" in ctype and content_runs and framing[0] != "none":
        mode = "json"
    else:
        mode = "plain"
    headers = resp.end_to_end(("content-length",))
    headers += ex.fault_headers(altering=mode != "plain")
    first = f"HTTP/1.1 {resp.first[1]} {resp.first[2]}".rstrip()
    w = ex.writer

    if mode == "json":
        try:
            body = await read_body(r, framing, JSON_LIMIT)
        except _BROKEN as e:
            raise UpstreamError(f"reading the answer: {type(e).__name__}: {e}") from None
        try:
            obj = json.loads(body)
            if apply_content(content_runs, obj, streamed=False):
                body = json.dumps(obj).encode()
        except ValueError:
            pass  # not JSON after all: relayed as it is
        _conn(headers, ex)
        w.write(encode_head(first, headers + [("Content-Length", str(len(body)))]) + body)
        ex.answered = True
        await w.drain()
        return up_keep, ex.keep

    chunked = False
    if framing[0] == "length":
        headers.append(("Content-Length", str(framing[1])))
    elif framing[0] == "none":
        if resp.get("content-length") is not None and status not in (204,) and status >= 200:
            headers.append(("Content-Length", resp.get("content-length")))  # HEAD / 304: the size it would have
    elif ex.version == "HTTP/1.1":
        chunked = True
        headers.append(("Transfer-Encoding", "chunked"))
    else:
        ex.keep = False  # an HTTP/1.0 client: the end of the body is the close
    if mode == "sse" and framing[0] == "length":
        headers.pop()  # the faults change the length: chunked (or close) instead
        if ex.version == "HTTP/1.1":
            chunked = True
            headers.append(("Transfer-Encoding", "chunked"))
        else:
            ex.keep = False
    _conn(headers, ex)
    head_bytes = encode_head(first, headers)
    try:
        if mode == "plain":
            await _relay_plain(r, upstream_w, framing, chunked, head_bytes, ex)
            return up_keep, ex.keep
        w.write(head_bytes)
        ex.answered = True
        return await _relay_sse(r, framing, ex, stream_runs, content_runs, chunked, up_keep)
    except _BROKEN:
        ex.quiet()
        return False, False  # cut short on either side: nothing more to do than close both


async def _relay_plain(r, upstream_w, framing, chunked: bool, head_bytes: bytes, ex) -> None:
    """Relay the body as each read brings it, from the pump's read callback: the head goes with the first piece
    when that came with it, and at once when it did not (a client waits for its status)."""
    ex.answered = True
    w = ex.writer
    pump = Pump(r, upstream_w, framing)
    out = [head_bytes]
    if pump.waiting:
        w.write(head_bytes)
        out = []

    def write(data: bytes, ended: bool) -> None:
        if data:
            out.append(chunk(data) if chunked else data)
        if ended and chunked:
            out.append(LAST_CHUNK)
        if out:
            w.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    pump.attach(to_client(write, w))  # full: read no more upstream until it drains
    failed = await pump.run(w.drain)
    if failed is not None:
        raise failed
    await w.drain()


async def _relay_sse(r, framing, ex, stream_runs, content_runs, chunked: bool, up_keep: bool):
    w = ex.writer
    sx = StreamCtx()
    buf = b""

    def send(events: list[Event]) -> None:
        if events:
            data = b"".join(e.raw for e in events)
            w.write(chunk(data) if chunked else data)

    try:
        async for piece in iter_body(r, framing):
            events, buf = split_events(buf + piece)
            for ev in events:
                token = ev.is_token  # counted as the upstream sent it, whatever a content fault makes of it
                if content_runs and token and apply_content(content_runs, ev.obj, streamed=True):
                    ev = Event.of(ev.obj)
                out = [ev]
                for run in stream_runs:
                    if run.active:
                        nxt = []
                        for e in out:
                            nxt += await run.effect.on_event(run, sx, e)
                        out = nxt
                if token:
                    sx.tokens += 1
                send(out)
            await w.drain()
        if buf:
            send([Event(buf)])
        for run in stream_runs:
            if run.active:
                send(run.effect.on_end(run, sx))
        if chunked:
            w.write(LAST_CHUNK)
        await w.drain()
        return up_keep, ex.keep
    except StreamEnd as end:
        send(end.events)
        if end.mode == "reset":
            await w.drain()
            ex.quiet()
            _reset(w)
            return False, False
        if chunked:
            w.write(LAST_CHUNK)  # a clean end of the HTTP body: only the SSE stream is short
        await w.drain()
        if end.mode == "cut":
            ex.quiet()
            return False, False
        return False, ex.keep  # the upstream's rest was not read: that connection cannot be reused


def _conn(headers: list, ex) -> None:
    if not ex.keep:
        headers.append(("Connection", "close"))


def _reset(writer) -> None:
    """Close with RST: SO_LINGER on with 0 seconds, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
