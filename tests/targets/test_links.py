"""A run's proxies on a user's own Toxiproxy server are journaled before they are made: a run SIGKILLed between a
create and its journal line left a proxy that `chaos recover` never knew of (seen once in CI's interrupt trials)."""

import json
import urllib.request
from types import SimpleNamespace

from chaos.targets.base import Instance
from chaos.targets.links import L4, Links, delete_journaled_proxies

# the user's own server (TOXIPROXY_URL, or toxiproxy-server on PATH), or the bundled one standing in
from ..run.test_links import _free_port, toxiproxy_url  # noqa: F401


def _proxies(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url + "/proxies", timeout=5).read())


def _target(url: str, n: int = 2):
    upstream = [Instance(i, f"r{i}", f"http://127.0.0.1:{_free_port()}", 0) for i in range(n)]
    return SimpleNamespace(instances=upstream, gateway=None, all_instances=lambda: upstream, fault_token="t",
                           spec=SimpleNamespace(settings={"toxiproxy": {"url": url}}, toxiproxy={"url": url}))


def test_the_proxies_are_journaled_before_the_server_has_any_of_them(toxiproxy_url, tmp_path):  # noqa: F811
    server = toxiproxy_url
    ours = ["chaos-t1-r0", "chaos-t1-r1"]
    links = Links(_target(server), {"r0": {L4}, "r1": {L4}}, str(tmp_path), run_tag="t1")
    journaled = []

    def on_created(info):
        journaled.append({**info, "on_server_then": sorted(set(_proxies(server)) & set(ours))})

    links.on_created = on_created
    links.up()
    assert len(journaled) == 1, journaled
    info = journaled[0]
    assert info["external"] and info["toxiproxy"] == server
    assert sorted(info["proxies"]) == ours
    assert info["on_server_then"] == []  # written ahead: nothing made yet
    assert set(ours) <= set(_proxies(server))
    # what `chaos recover` does with that line: every proxy goes, and names never made are no error
    done = delete_journaled_proxies(info)
    assert len(done) == 2 and all(line.startswith("deleted proxy chaos-t1-r") for line in done), done
    assert not set(ours) & set(_proxies(server))
    assert delete_journaled_proxies(info) == []
