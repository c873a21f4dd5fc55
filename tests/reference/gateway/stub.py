"""A small purpose-made upstream for the gateway tests, run as its own process: a real aiohttp server on
loopback whose misbehaviour is ours to choose, and that counts what reached it (GET /stats).

    python tests/reference/gateway/stub.py '{"name": "s0", "poison": "POISON"}'

config: name (x-served-by), poison (a body containing it gets 500 internal_error; others 200), status (every
generation gets it, with retry_after_ms as Retry-After when given), generate_delay_s (each generation waits
that long before answering; stats' health_during then lists, per generation, how many /health checks arrived
meanwhile), health_slow_every / health_slow_s (every Nth /health answers only after that long), stream_events /
event_bytes (a streamed answer is that many events of about that size, written as fast as the connection takes
them; stats' stream_write_s lists how long each such answer took to write).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

from aiohttp import web

from chaos.common import stop_group


def build(cfg: dict) -> web.Application:
    stats = {"requests": 0, "poison": 0, "bytes": 0, "max_body": 0, "health": 0, "health_during": []}
    name = cfg.get("name", "s0")

    async def generate(request: web.Request):
        raw = await request.read()
        stats["requests"] += 1
        stats["bytes"] += len(raw)
        stats["max_body"] = max(stats["max_body"], len(raw))
        if cfg.get("generate_delay_s"):
            checks = stats["health"]
            await asyncio.sleep(cfg["generate_delay_s"])
            stats["health_during"].append(stats["health"] - checks)
        headers = {"x-served-by": name}
        if cfg.get("poison") and cfg["poison"].encode() in raw:
            stats["poison"] += 1
            err = {"error": {"message": "internal error: this body breaks me", "type": "server_error",
                             "param": None, "code": "internal_error"}}
            return web.json_response(err, status=500, headers=headers)
        if cfg.get("status"):
            if cfg.get("retry_after_ms") is not None:
                headers["retry-after-ms"] = str(cfg["retry_after_ms"])
            err = {"error": {"message": f"scripted {cfg['status']}", "type": "server_error", "param": None,
                             "code": "scripted"}}
            return web.json_response(err, status=cfg["status"], headers=headers)
        try:  # big bodies are only counted: parsing them would load the machine the test measures on
            stream = len(raw) < 2**20 and bool(json.loads(raw).get("stream"))
        except (ValueError, AttributeError):
            stream = False
        base = {"id": "cmpl-stub", "object": "text_completion", "created": int(time.time()), "model": "stub",
                "system_fingerprint": name}
        if not stream:
            return web.json_response({**base, "choices": [{"index": 0, "text": "ok", "logprobs": None,
                                                           "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
                                     headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if cfg.get("stream_events"):
            t0, pad = time.monotonic(), "x" * cfg.get("event_bytes", 1024)
            for i in range(cfg["stream_events"]):
                chunk = {**base, "choices": [{"index": 0, "text": pad, "logprobs": None, "finish_reason": None}],
                         "i": i}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")  # waits while the reader lags
            await resp.write(b"data: [DONE]\n\n")
            stats.setdefault("stream_write_s", []).append(time.monotonic() - t0)
            return resp
        for text, finish in (("o", None), ("k", "stop")):
            chunk = {**base, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def health(request):
        stats["health"] += 1
        every = cfg.get("health_slow_every") or 0
        if every and stats["health"] % every == 0:
            await asyncio.sleep(cfg.get("health_slow_s", 1.5))
        return web.Response(headers={"x-served-by": name})

    async def get_stats(request):
        return web.json_response(stats)

    app = web.Application(client_max_size=256 * 2**20)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    app.router.add_get("/health", health)
    app.router.add_get("/stats", get_stats)
    return app


class Stub:
    """The stub as a child process in its own session; stopped by its process group."""

    def __init__(self, **cfg):
        self.cfg = cfg
        self.proc = subprocess.Popen([sys.executable, __file__, json.dumps(cfg)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        found: list[str] = []
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                if line.startswith("listening on ") and not found:
                    found.append(line.split()[-1])
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(30) or not found:
            self.stop()
            raise RuntimeError("the stub upstream did not start")
        self.url = found[0]

    def stats(self) -> dict:
        import urllib.request
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        stop_group(self.proc.pid, None, 5, self.proc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


async def _main(cfg: dict):
    runner = web.AppRunner(build(cfg), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
