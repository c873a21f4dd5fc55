"""The bundled server's own entry points: the CLI (ready line, --config, the loopback guard, SIGTERM -> 0) and
ToxiproxyServer used in-process (port 0, stop closing what it opened)."""

from __future__ import annotations

import asyncio
import json
import re
import os
import signal
import socket
import subprocess
import sys

import pytest

from chaos.proxy.toxiproxy import ToxiproxyServer

from .support import api


@pytest.mark.parametrize("entry", [["chaos.proxy.toxiproxy"], ["chaos", "proxy", "serve"]])
def test_cli_config_ready_line_and_sigterm(tmp_path, upstream, entry):
    cfg = tmp_path / "proxies.json"
    cfg.write_text(json.dumps([{"name": "from_config", "listen": "127.0.0.1:0",
                                "upstream": f"127.0.0.1:{upstream.http_port}"}]))
    proc = subprocess.Popen([sys.executable, "-m", *entry, "--port", "0", "--config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline().strip()
        m = re.fullmatch(r"toxiproxy-compatible API listening on http://127\.0\.0\.1:(\d+) "
                         r"\(event loop (uvloop|asyncio)\)", line)
        assert m, line
        port = int(m.group(1))
        st, _, body = api(port, "GET", "/proxies/from_config")
        assert st == 200 and json.loads(body)["enabled"] is True
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_cli_refuses_a_remote_host_without_allow_remote():
    r = subprocess.run([sys.executable, "-m", "chaos.proxy.toxiproxy", "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--allow-remote" in r.stderr


def test_in_process_server_start_stop(upstream):
    async def scenario():
        srv = ToxiproxyServer(port=0)
        await srv.start()
        assert srv.port != 0
        loop = asyncio.get_running_loop()
        st, _, body = await loop.run_in_executor(None, lambda: api(srv.port, "POST", "/proxies", {
            "name": "inproc", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream.echo_port}"}))
        assert st == 201
        port = int(json.loads(body)["listen"].rsplit(":", 1)[1])
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"ping")
        assert await asyncio.wait_for(r.readexactly(4), 5) == b"ping"
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)  # closed by the client: forgotten
        w2.write(b"x")
        assert await asyncio.wait_for(r2.readexactly(1), 5) == b"x"
        w2.close()
        proxy = srv.proxies["inproc"]
        for _ in range(100):
            if len(proxy.connections) == 1:
                break
            await asyncio.sleep(0.02)
        assert len(proxy.connections) == 1
        await srv.stop()
        assert await asyncio.wait_for(r.read(10), 5) == b""  # stop closed the open connection
        assert not proxy.connections
        w.close()
        for p in (srv.port, port):
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", p)) != 0  # and every listener

    asyncio.run(scenario())


def test_populate_argument_is_json_text_or_a_file(tmp_path):
    from chaos.proxy.toxiproxy.cli import load_populate

    items = [{"name": "a", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(items))
    assert load_populate(json.dumps(items)) == items == load_populate(str(f))
    for bad in (str(tmp_path / "missing.json"), "[not json"):
        with pytest.raises(ValueError, match="proxy config"):
            load_populate(bad)
    f.write_text('{"name": "a"}')
    with pytest.raises(ValueError, match="not a list"):
        load_populate(str(f))
