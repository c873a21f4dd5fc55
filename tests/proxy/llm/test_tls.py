"""An https upstream with a base path, verified by the default SSL context (the CA given by SSL_CERT_FILE)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys

import pytest
from aiohttp import web

from .conftest import Upstream, chat, contents, request

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a cert")


def test_https_upstream_with_base_path(loop_thread, tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    up = Upstream()

    async def start():
        runner = web.AppRunner(up.app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = loop_thread.run(start())
    url = f"https://localhost:{port}/api/v3"
    p = subprocess.Popen([sys.executable, "-m", "chaos.proxy.llm", "--listen", "127.0.0.1:0", "--upstream", url],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "SSL_CERT_FILE": str(cert)})
    try:
        m = re.search(r":(\d+) -> ", p.stdout.readline())
        assert m
        px = int(m.group(1))
        status, _, body = request(px, "POST", "/chat/completions", {"stream": True, "n": 4})
        assert status == 200 and contents(body) == [f"w{i} " for i in range(4)]
        assert up.requests[-1]["path"] == "/api/v3/chat/completions"
        assert up.requests[-1]["headers"]["Host"] == f"localhost:{port}"
        assert json.loads(request(px, "POST", "/chat/completions", {"stream": False})[2])["object"] == "chat.completion"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        loop_thread.run(runner.cleanup())


def test_an_untrusted_certificate_is_a_502(loop_thread, tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    up = Upstream()

    async def start():
        runner = web.AppRunner(up.app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = loop_thread.run(start())
    from chaos.proxy.llm import LLMProxy

    async def start_proxy():
        px = LLMProxy(f"https://localhost:{port}")
        await px.start()
        return px

    px = loop_thread.run(start_proxy())
    try:
        status, _, body = chat(px.port)
        assert status == 502 and "CERTIFICATE" in json.loads(body)["error"]["message"].upper()
    finally:
        loop_thread.run(px.stop())
        loop_thread.run(runner.cleanup())
