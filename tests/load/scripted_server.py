"""A scripted OpenAI-style SSE server for the load tests: its timing and its misbehaviour are ours.

Raw asyncio TCP, so it can do what a framework would not: reset the connection, stall
before the headers, send garbage, end a stream without [DONE]. It runs on loopback in a
thread of the test process and counts what it received.
"""

import asyncio
import json
import socket
import struct
import threading
import time


class ScriptedServer:
    def __init__(self, mode="ok", first_delay=0.0, gap=0.0, tokens=5, retry_after_ms=10, terminator_delay=0.0,
                 odd=None, odd_at=0, finish="stop", on_chunk=None, script=None, served_by="scripted-1"):
        self.mode, self.first_delay, self.gap, self.tokens = mode, first_delay, gap, tokens
        self.terminator_delay = terminator_delay  # the chunked end marker as a later write, as uvicorn does
        self.odd, self.odd_at = odd, odd_at  # a chunk object sent in place of content piece odd_at (-1: the usage)
        self.served_by = served_by  # its x-served-by (None: none, as llama-server and vLLM send)
        self.finish = finish  # the last content chunk's finish_reason (None: a stream that never says why it ended)
        self.on_chunk = on_chunk  # called (in the server's thread) with the index of each content chunk written
        # (mode, x-chaos-fault value, a list of them, or None) for the 1st, 2nd, ... generation request, as a fault proxy in front
        # would answer them; past its end, mode and no header
        self.script = list(script or [])
        self.request_ids: list[str | None] = []  # each generation request's x-request-id, in arrival order
        self.connections = 0
        self.retry_after_ms = retry_after_ms
        self.arrivals: list[float] = []
        self.received = 0
        self.loop = asyncio.new_event_loop()
        self.port = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        async def shutdown():
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if path.endswith("/health"):
                    await self._send_json(writer, 200, {})
                    continue
                if path.endswith("/models"):
                    await self._send_json(writer, 200, {"object": "list", "data": [{"id": "scripted",
                                                                                   "owned_by": "tests"}]})
                    continue
                self.received += 1
                self.arrivals.append(time.monotonic())
                self.request_ids.append(headers.get("x-request-id"))
                keep = await self._respond(writer, json.loads(body or b"{}"), headers)
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def _send_json(self, writer, status, obj, extra=""):
        data = json.dumps(obj).encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                     f"{extra}\r\n".encode() + data)
        await writer.drain()

    def _chunk(self, text, finish=None):
        obj = {"id": "x", "object": "chat.completion.chunk", "system_fingerprint": "scripted",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
        return self._sse(obj)

    @staticmethod
    def _sse(obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    async def _respond(self, writer, body, headers) -> bool:
        mode, fault = self.script[self.received - 1] if self.received <= len(self.script) else (self.mode, None)
        # a list: one header per rule, as the proxy sends when two rules acted
        fault_header = "".join(f"x-chaos-fault: {f}\r\n" for f in ([fault] if isinstance(fault, str) else fault or []))
        if mode == "stall":  # accept, read, never answer
            await asyncio.sleep(3600)
        if mode == "http429":
            await self._send_json(writer, 429, {"error": {"message": "slow down", "type": "requests", "param": None,
                                                          "code": "rate_limit_exceeded"}},
                                  f"Retry-After: {self.retry_after_ms // 1000}\r\nretry-after-ms: {self.retry_after_ms}\r\n"
                                  + fault_header)
            return True
        if mode.startswith("http5"):  # e.g. http503: a server error in OpenAI's shape, no Retry-After
            await self._send_json(writer, int(mode[4:]), {"error": {"message": "injected", "type": "server_error",
                                                                    "param": None, "code": "injected_fault"}},
                                  fault_header)
            return True
        if mode == "reset_early":
            self._reset(writer)
            return False
        served = f"x-served-by: {self.served_by}\r\n" if self.served_by else ""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     + served.encode() + fault_header.encode() + b"\r\n")
        await writer.drain()
        await asyncio.sleep(self.first_delay)
        text = "{\"a\": 1}" if mode == "json_ok" else "tok"
        pieces = [text] if mode == "json_ok" else ["not json", " at all"] if mode == "json_bad" else [text] * self.tokens
        for i, piece in enumerate(pieces):
            if i:
                await asyncio.sleep(self.gap)
            if mode == "reset_mid" and i == 2:
                self._reset(writer)
                return False
            if mode == "error_event" and i == 2:
                writer.write(self._sse({"error": {"message": "engine died", "type": "server_error",
                                                  "code": "engine_dead"}}))
                break
            if mode == "garbage" and i == 2:
                writer.write(self._sse(b"{this is not json"))
                continue
            if self.odd is not None and i == self.odd_at:
                writer.write(self._sse(self.odd))
            else:
                writer.write(self._chunk(piece, self.finish if i == len(pieces) - 1 else None))
            await writer.drain()
            if self.on_chunk is not None:
                self.on_chunk(i)
        if mode != "no_done":
            usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": len(pieces), "total_tokens": 3 + len(pieces)}}
            writer.write(self._sse(self.odd if self.odd is not None and self.odd_at == -1 else usage)
                         + self._sse(b"[DONE]"))
        if self.terminator_delay:
            await writer.drain()
            await asyncio.sleep(self.terminator_delay)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _reset(writer):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
