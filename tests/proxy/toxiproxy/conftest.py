"""One behaviour suite, two engines: "bundled" (python -m chaos.proxy.toxiproxy in a subprocess) and "real"
(TOXIPROXY_URL, or a toxiproxy-server on PATH started here; skipped when neither is there)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from toxiproxy import Toxiproxy

from .support import Upstream, api

NO_REAL = "no real toxiproxy-server: set TOXIPROXY_URL or put toxiproxy-server on PATH"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_version(port: int, proc: subprocess.Popen | None, deadline_s: float = 15) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before answering GET /version")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no answer on GET http://127.0.0.1:{port}/version within {deadline_s}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)  # only the process we started, by its PID
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


class Engine:
    def __init__(self, kind: str, port: int):
        self.kind = kind
        self.port = port
        self.created: list[str] = []

    @property
    def client(self) -> Toxiproxy:
        t = Toxiproxy()
        t.update_api_consumer("127.0.0.1", self.port)  # class attributes: set before every use
        return t

    def api(self, method, path, body=None, headers=None, raw=None):
        return api(self.port, method, path, body, headers, raw)

    def name(self, prefix: str = "p") -> str:
        n = f"{prefix}_{uuid.uuid4().hex[:8]}"
        self.created.append(n)
        return n

    def proxy(self, upstream_port: int, **extra) -> dict:
        """A fresh proxy on 127.0.0.1:0 to 127.0.0.1:upstream_port; returns its JSON."""
        body = {"name": self.name(), "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream_port}", **extra}
        st, _, data = self.api("POST", "/proxies", body)
        assert st == 201, data
        return json.loads(data)

    def toxic(self, proxy: str, **body) -> dict:
        st, _, data = self.api("POST", f"/proxies/{proxy}/toxics", body)
        assert st == 200, data
        return json.loads(data)

    def cleanup(self):
        for n in self.created:
            self.api("DELETE", f"/proxies/{n}")
        self.created.clear()


@pytest.fixture(scope="session")
def upstream():
    u = Upstream()
    yield u
    u.close()


@pytest.fixture(scope="session", params=["bundled", "real"])
def server(request, tmp_path_factory):
    if request.param == "bundled":
        port = _free_port()
        log = tmp_path_factory.mktemp("bundled") / "stderr.txt"
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "chaos.proxy.toxiproxy", "--port", str(port)],
                                    stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            _wait_version(port, proc)
            yield Engine("bundled", port)
        finally:
            _stop(proc)
        # every connection the suite broke on purpose must have been handled, not left to asyncio's logger
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and "exception" not in text.lower(), text[-4000:]
        return
    url = os.environ.get("TOXIPROXY_URL")
    if url:
        u = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        port = u.port or 8474
        _wait_version(port, None, 5)
        yield Engine("real", port)
        return
    binary = shutil.which("toxiproxy-server")
    if not binary:
        pytest.skip(NO_REAL)
    port = _free_port()
    proc = subprocess.Popen([binary, "-host", "127.0.0.1", "-port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_version(port, proc)
        yield Engine("real", port)
    finally:
        _stop(proc)


@pytest.fixture
def engine(server):
    """The engine for one test; the proxies the test made are deleted after it."""
    yield server
    server.cleanup()
