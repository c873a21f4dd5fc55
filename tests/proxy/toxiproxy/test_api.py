"""The HTTP API as clients see it: routes, JSON fields, defaults, status codes and error bodies, driven by raw
HTTP and by the unmodified toxiproxy-python client."""

from __future__ import annotations

import json
import socket

import pytest
from toxiproxy.exceptions import NotFound, ProxyExists


def _err(status, headers, body):
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body.endswith(b"\n")
    return status, json.loads(body)


def test_version(engine):
    st, h, body = engine.api("GET", "/version")
    assert st == 200 and h["content-type"].startswith("application/json")
    assert json.loads(body) == {"version": "2.12.0"} and body.endswith(b"\n")


def test_request_id_on_every_routed_answer_and_no_server_header(engine, upstream):
    """The real server's request-id middleware tags every answer of a known route (errors and the browser
    refusal too) with a fresh xid; Go sends no Server header, and aiohttp's own is dropped."""
    p = engine.proxy(upstream.http_port)
    answers = [engine.api("GET", "/version"), engine.api("GET", f"/proxies/{p['name']}"),
               engine.api("GET", "/proxies/no-such-proxy"), engine.api("POST", "/proxies", {"name": "x"}),
               engine.api("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0 (X11)"})]
    assert [st for st, _, _ in answers] == [200, 200, 404, 400, 403]
    ids = [h.get("x-toxiproxy-request-id") for _, h, _ in answers]
    assert all(i is not None and len(i) == 20 and set(i) <= set("0123456789abcdefghijklmnopqrstuv") for i in ids), ids
    assert len(set(ids)) == len(ids)
    for _, h, _ in answers + [engine.api("GET", "/nope")]:
        assert "server" not in h, h


def test_create_show_list_delete(engine, upstream):
    p = engine.proxy(upstream.http_port)
    assert p["listen"].startswith("127.0.0.1:") and not p["listen"].endswith(":0")
    assert p["enabled"] is True and p["toxics"] == [] and p["upstream"] == f"127.0.0.1:{upstream.http_port}"
    st, h, body = engine.api("GET", f"/proxies/{p['name']}")
    assert st == 200 and h["content-type"] == "application/json"
    shown = json.loads(body)
    assert shown.get("Logger", {}) == p.pop("Logger", {}) == {}  # the real server's Go artefact, in both answers
    assert {k: v for k, v in shown.items() if k != "Logger"} == p
    st, _, body = engine.api("GET", "/proxies")
    assert st == 200 and p["name"] in json.loads(body)
    st, _, body = engine.api("DELETE", f"/proxies/{p['name']}")
    assert st == 204 and body == b""
    assert _err(*engine.api("GET", f"/proxies/{p['name']}")) == (404, {"error": "proxy not found", "status": 404})


def test_proxy_errors(engine, upstream):
    p = engine.proxy(upstream.http_port)
    dup = {"name": p["name"], "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}
    assert _err(*engine.api("POST", "/proxies", dup)) == (409, {"error": "proxy already exists", "status": 409})
    assert _err(*engine.api("POST", "/proxies", {"upstream": "127.0.0.1:1"})) == (
        400, {"error": "missing required field: name", "status": 400})
    assert _err(*engine.api("POST", "/proxies", {"name": engine.name()})) == (
        400, {"error": "missing required field: upstream", "status": 400})
    st, err = _err(*engine.api("POST", "/proxies", {"name": 5, "upstream": "x:1"}))
    assert st == 400 and err["error"].startswith("bad request body: ")
    taken = {"name": engine.name(), "listen": p["listen"], "upstream": "127.0.0.1:1"}
    st, err = _err(*engine.api("POST", "/proxies", taken))
    assert st == 500 and err["error"] == f"listen tcp {p['listen']}: bind: address already in use"


def test_routes_methods_and_browsers(engine):
    st, h, body = engine.api("GET", "/nope")
    assert (st, body) == (404, b"404 page not found\n")
    st, _, body = engine.api("PUT", "/proxies")
    assert (st, body) == (405, b"")
    st, _, body = engine.api("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0 (X11)"})
    assert st == 403 and body == b"User agent not allowed\n"


def test_toxic_defaults_order_and_errors(engine, upstream):
    name = engine.proxy(upstream.http_port)["name"]
    st, h, body = engine.api("POST", f"/proxies/{name}/toxics", {"type": "latency", "attributes": {"latency": 5}})
    assert st == 200 and h["content-type"] == "application/json"
    assert json.loads(body) == {"name": "latency_downstream", "type": "latency", "stream": "downstream",
                                "toxicity": 1, "attributes": {"latency": 5, "jitter": 0}}
    t = engine.toxic(name, type="slicer", stream="upstream", toxicity=0)
    assert t["toxicity"] == 0 and t["name"] == "slicer_upstream"
    assert t["attributes"] == {"average_size": 0, "size_variation": 0, "delay": 0}
    st, _, body = engine.api("GET", f"/proxies/{name}/toxics")
    assert [x["name"] for x in json.loads(body)] == ["slicer_upstream", "latency_downstream"]
    assert _err(*engine.api("POST", f"/proxies/{name}/toxics", {"type": "latency"})) == (
        409, {"error": "toxic already exists", "status": 409})
    assert _err(*engine.api("POST", f"/proxies/{name}/toxics", {"type": "nope"})) == (
        400, {"error": "invalid toxic type", "status": 400})
    assert _err(*engine.api("POST", f"/proxies/{name}/toxics", {"type": "latency", "stream": "sideways"})) == (
        400, {"error": "stream was invalid, can be either upstream or downstream", "status": 400})
    st, err = _err(*engine.api("POST", f"/proxies/{name}/toxics",
                               {"type": "bandwidth", "attributes": {"rate": "fast"}}))
    assert st == 400 and err["error"].startswith("bad request body: ")
    assert _err(*engine.api("GET", f"/proxies/{name}/toxics/none")) == (
        404, {"error": "toxic not found", "status": 404})
    assert _err(*engine.api("GET", "/proxies/none/toxics")) == (404, {"error": "proxy not found", "status": 404})


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_updates_merge(engine, upstream, method):
    name = engine.proxy(upstream.http_port)["name"]
    engine.toxic(name, type="latency", attributes={"latency": 50, "jitter": 5})
    st, _, body = engine.api(method, f"/proxies/{name}/toxics/latency_downstream", {"attributes": {"jitter": 9}})
    t = json.loads(body)
    assert st == 200 and t["attributes"] == {"latency": 50, "jitter": 9} and t["toxicity"] == 1
    st, _, body = engine.api(method, f"/proxies/{name}/toxics/latency_downstream", {"toxicity": 0.5})
    assert json.loads(body)["toxicity"] == 0.5 and json.loads(body)["attributes"]["latency"] == 50
    st, _, body = engine.api(method, f"/proxies/{name}", {"enabled": False})
    p = json.loads(body)
    assert st == 200 and p["enabled"] is False and p["upstream"] == f"127.0.0.1:{upstream.http_port}"
    st, _, body = engine.api("DELETE", f"/proxies/{name}/toxics/latency_downstream")
    assert st == 204 and body == b""


def test_reset_enables_and_clears(engine, upstream):
    name = engine.proxy(upstream.http_port, enabled=False)["name"]
    engine.toxic(name, type="timeout")
    st, _, body = engine.api("POST", "/reset")
    assert st == 204 and body == b""
    p = json.loads(engine.api("GET", f"/proxies/{name}")[2])
    assert p["enabled"] is True and p["toxics"] == [] and not p["listen"].endswith(":0")


def test_listen_forms(engine, upstream):
    up = f"127.0.0.1:{upstream.http_port}"
    for listen, prefix in (("localhost:0", "127.0.0.1:"), (":0", "[::]:"), ("0.0.0.0:0", "[::]:"), ("", "[::]:")):
        st, _, body = engine.api("POST", "/proxies", {"name": engine.name(), "listen": listen, "upstream": up})
        shown = json.loads(body)["listen"]
        assert st == 201 and shown.startswith(prefix) and not shown.endswith(":0"), (listen, shown)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    explicit = f"127.0.0.1:{free}"
    st, _, body = engine.api("POST", "/proxies", {"name": engine.name(), "listen": explicit, "upstream": up})
    assert st == 201 and json.loads(body)["listen"] == explicit
    name = engine.name()
    st, _, body = engine.api("POST", "/proxies",
                             {"name": name, "listen": "127.0.0.1:0", "upstream": up, "enabled": False})
    assert json.loads(body)["listen"] == "127.0.0.1:0"  # unresolved until enabled
    st, _, body = engine.api("PATCH", f"/proxies/{name}", {"enabled": True})
    assert json.loads(body)["listen"].startswith("127.0.0.1:") and json.loads(body)["listen"] != "127.0.0.1:0"


def test_populate(engine, upstream):
    up = f"127.0.0.1:{upstream.http_port}"
    a, b = engine.name(), engine.name()
    st, h, body = engine.api("POST", "/populate", [{"name": a, "listen": "127.0.0.1:0", "upstream": up},
                                                   {"name": b, "listen": "127.0.0.1:0", "upstream": up}])
    out = json.loads(body)
    assert st == 201 and [p["name"] for p in out["proxies"]] == [a, b] and "error" not in out
    first, held = out["proxies"][0]["listen"], out["proxies"][1]["listen"]
    st, _, body = engine.api("POST", "/populate", [{"name": a, "listen": "127.0.0.1:0", "upstream": up}])
    assert st == 201 and json.loads(body)["proxies"][0]["listen"] != first  # restarted on a new port
    st, _, body = engine.api("POST", "/populate", [])
    assert st == 201 and json.loads(body) == {"proxies": None}
    st, _, body = engine.api("POST", "/populate", [{"name": engine.name(), "upstream": up}, {"upstream": up}])
    out = json.loads(body)
    assert st == 400 and out["status"] == 400 and "missing required field: name" in out["error"]
    assert "proxies" in out
    c = engine.name()
    st, _, body = engine.api("POST", "/populate", [{"name": c, "listen": "127.0.0.1:0", "upstream": up},
                                                   {"name": engine.name(), "listen": held, "upstream": up}])
    out = json.loads(body)
    assert st == 500 and "address already in use" in out["error"] and [p["name"] for p in out["proxies"]] == [c]


def test_toxiproxy_python_client(engine, upstream):
    client = engine.client
    assert b"2.12.0" in client.version()
    name = engine.name("client")
    proxy = client.create(upstream=f"127.0.0.1:{upstream.http_port}", name=name)
    assert proxy.listen.startswith("127.0.0.1:") and client.get_proxy(name).upstream == proxy.upstream
    with pytest.raises(ProxyExists):
        client.create(upstream=f"127.0.0.1:{upstream.http_port}", name=name)
    proxy.add_toxic(type="latency", attributes={"latency": 10})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="bw", attributes={"rate": 100})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "bw"} and toxics["bw"].attributes == {"rate": 100}
    assert proxy.destroy_toxic("bw") and set(proxy.toxics()) == {"latency_downstream"}
    with pytest.raises(NotFound):
        proxy.destroy_toxic("bw")
    proxy.disable()
    assert client.get_proxy(name).enabled is False
    proxy.enable()
    assert client.reset() and proxy.toxics() == {}
    assert proxy.destroy() and client.get_proxy(name) is None
