"""A run's proxies on a user's own Toxiproxy server are journaled before they are made: a run SIGKILLed between a
create and its journal line left a proxy that `chaos recover` never knew of (seen once in CI's interrupt trials)."""

import json
import socket
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import pytest

from chaos.targets.base import Instance
from chaos.targets.links import L4, Links, delete_journaled_proxies


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proxies(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url + "/proxies", timeout=5).read())


@pytest.fixture
def server(tmp_path):
    """The bundled Toxiproxy API, standing in for the user's server: the run reaches it by URL and must not stop it."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "proxy", "serve", "--host", "127.0.0.1", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _proxies(url)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the bundled Toxiproxy API did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _target(url: str, n: int = 2):
    upstream = [Instance(i, f"r{i}", f"http://127.0.0.1:{_free_port()}", 0) for i in range(n)]
    return SimpleNamespace(instances=upstream, gateway=None, all_instances=lambda: upstream, fault_token="t",
                           spec=SimpleNamespace(settings={"toxiproxy": {"url": url}}))


def test_the_proxies_are_journaled_before_the_server_has_any_of_them(server, tmp_path):
    links = Links(_target(server), {"r0": {L4}, "r1": {L4}}, str(tmp_path), run_tag="t1")
    journaled = []

    def on_created(info):
        journaled.append({**info, "on_server_then": sorted(_proxies(server))})

    links.on_created = on_created
    links.up()
    assert len(journaled) == 1, journaled
    info = journaled[0]
    assert info["external"] and info["toxiproxy"] == server
    assert sorted(info["proxies"]) == ["chaos-t1-r0", "chaos-t1-r1"]
    assert info["on_server_then"] == []  # written ahead: nothing made yet
    assert sorted(_proxies(server)) == ["chaos-t1-r0", "chaos-t1-r1"]
    # what `chaos recover` does with that line: every proxy goes, and names never made are no error
    done = delete_journaled_proxies(info)
    assert len(done) == 2 and all(line.startswith("deleted proxy chaos-t1-r") for line in done), done
    assert _proxies(server) == {}
    assert delete_journaled_proxies(info) == []
