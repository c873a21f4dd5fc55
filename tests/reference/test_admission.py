"""Admission before parsing: a server that would refuse a request anyway (full, draining, engine stopped) does so
before it reads or parses the body, and large bodies queue for the body worker only a few deep, a client that
leaves while its body waits costing no parse."""

import asyncio
import json
import socket
import threading
import time
from urllib.parse import urlparse

import psutil

from chaos.reference.launcher import start_server

from .http_util import post, request

M = "chaos-reference"


def test_a_full_server_refuses_before_it_reads_or_parses_the_body():
    with start_server(["--preset", "tiny", "--replica-id", "full", "--max-waiting", "0"]) as s:
        big_invalid = b'{"model": "' + M.encode() + b'", "prompt": ' + b"x" * 2**20  # not JSON: a 400 if parsed
        for raw in (big_invalid, b"{not json"):
            status, headers, body = post(s.base_url, "/v1/completions", raw=raw)
            assert status == 429 and body["error"]["code"] == "rate_limit_exceeded", (status, body)
            assert "retry-after" in headers
        workers = [p for p in psutil.Process(s.pid).children() if "worker_main" in " ".join(p.cmdline())]
        assert workers == [], "the body worker was started: the big body was parsed before it was refused"
        assert request(s.base_url, "GET", "/health")[0] == 200


class InProcessServer:
    """A ReferenceAPI on loopback in a thread of this process, its body worker's target swapped for
    worker_targets.hold (the engine is built, never started: every request here ends in a 400 or 503)."""

    def __init__(self):
        self.ready, self.base_url, self.api = threading.Event(), None, None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self):
        from chaos.reference.api import WORKER_QUEUE, ReferenceAPI, ServerSettings
        from chaos.reference.config import EngineConfig, preset
        from chaos.reference.engine.async_engine import AsyncEngine
        from chaos.reference.serving import BodyWorker, listen

        self.api = ReferenceAPI(ServerSettings(retry_after_s=3),
                                AsyncEngine(EngineConfig(model=preset("tiny"), max_model_len=1024)))
        self.api.body_worker = BodyWorker("tests.reference.worker_targets:hold", max_waiting=WORKER_QUEUE)
        runner, port = await listen(self.api.build_app(), "127.0.0.1", 0)
        self.base_url, self.loop, self.stop = f"http://127.0.0.1:{port}", asyncio.get_running_loop(), asyncio.Event()
        self.ready.set()
        await self.stop.wait()
        await runner.cleanup()
        proc = self.api.body_worker._proc
        self.api.close()
        if proc is not None:
            await proc.wait()  # reaped while its loop runs

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(60), "the in-process server did not start"
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


def wait_until(predicate, what: str, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s  # generous: only a broken server takes this long
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_large_bodies_wait_at_most_four_deep_and_one_whose_client_left_is_never_parsed(tmp_path, monkeypatch):
    from chaos.reference.api import WORKER_QUEUE

    monkeypatch.setenv("CHAOS_TEST_HOLD_DIR", str(tmp_path))  # the worker child inherits it
    calls = tmp_path / "calls"

    def parsed() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    big = json.dumps({"model": M, "prompt": "hi", "pad": "y" * 300_000}).encode()  # past LARGE_BODY
    with InProcessServer() as srv:
        worker = srv.api.body_worker
        answers = []

        def send():
            answers.append(post(srv.base_url, "/v1/completions", raw=big, timeout=90))

        threads = [threading.Thread(target=send)]  # the one the worker holds
        threads[0].start()
        wait_until(lambda: parsed() == 1, "the first body to reach the worker")
        u = urlparse(srv.base_url)
        leaver = socket.create_connection((u.hostname, u.port), timeout=30)  # first in the queue, then gone
        leaver.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(big)).encode() + b"\r\n\r\n" + big)
        wait_until(lambda: worker.waiting == 1, "the leaver to queue")
        for i in range(WORKER_QUEUE - 1):
            threads.append(threading.Thread(target=send))
            threads[-1].start()
            wait_until(lambda n=i + 2: worker.waiting == n, f"waiter {i + 2} to queue")

        # The queue is full: one more is refused at once, from its Content-Length or once a chunked one is read.
        status, headers, body = post(srv.base_url, "/v1/completions", raw=big, timeout=30)
        assert status == 503 and body["error"]["code"] == "server_busy", (status, body)
        assert headers["retry-after"] == "3"
        status, _, body = post(srv.base_url, "/v1/completions", raw=iter([big]), timeout=30)  # chunked
        assert status == 503 and body["error"]["code"] == "server_busy", (status, body)

        leaver.close()
        wait_until(lambda: worker.waiting == WORKER_QUEUE - 1, "the leaver's place to be given up")
        (tmp_path / "release").touch()
        for t in threads:
            t.join(90)
        assert [a[0] for a in answers] == [400] * WORKER_QUEUE
        assert all(a[2]["error"]["code"] == "held" for a in answers), answers
        # Queued ahead of the others, the leaver would have been parsed before them had it been.
        assert parsed() == WORKER_QUEUE, "the body of a client that had left was parsed"
        assert not worker.busy and worker.waiting == 0
