"""Binding and the fault routes: loopback unless --allow-remote, and /admin/faults only with the run's token, which
never appears in the server's output."""

import json
import os
import subprocess
import sys

import pytest

from chaos.reference.cli import remote_host_error
from chaos.reference.launcher import start_server

from .http_util import FAULT_HEADER, conn, fault_headers, request


def admin(base_url, method, path="/admin/faults", body=None, headers=None):
    """A fault-route call with exactly these headers (http_util's request adds the session token itself)."""
    c = conn(base_url)
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    payload = json.loads(r.read() or b"null")
    c.close()
    return r.status, payload


@pytest.mark.parametrize("method,path,body", [("GET", "/admin/faults", None),
                                              ("POST", "/admin/faults", {"step_delay_ms": 1}),
                                              ("DELETE", "/admin/faults", None),
                                              ("DELETE", "/admin/faults/step_delay_ms", None),
                                              ("POST", "/admin/faults", {"crash": True})])
def test_every_fault_route_needs_the_token(server, method, path, body):
    for headers in ({}, {FAULT_HEADER: "wrong"}, {FAULT_HEADER: ""}, {"Authorization": "Bearer x"}):
        status, err = admin(server.base_url, method, path, body, headers)
        assert status == 401, (headers, err)
        assert err["error"]["code"] == "invalid_fault_token" and set(err["error"]) == {"message", "type", "param",
                                                                                        "code"}
    assert request(server.base_url, "GET", "/health")[0] == 200  # the crash was refused
    assert request(server.base_url, "GET", "/admin/faults")[2]["active"] == {}  # and nothing was applied


def test_with_the_token_the_routes_work_and_the_token_is_never_printed(server, fault_token):
    status, state = admin(server.base_url, "POST", body={"step_delay_ms": 1}, headers=fault_headers())
    assert status == 200 and state["active"] == {"step_delay_ms": 1}
    status, state = admin(server.base_url, "DELETE", headers=fault_headers())
    assert status == 200 and state["active"] == {}
    token = fault_token
    assert server.fault_token == token
    assert not any(token in line for line in server.output), "the fault token reached the server's output"
    assert token not in repr(server)


@pytest.mark.slow
def test_start_server_makes_a_token_when_none_is_given(monkeypatch):
    monkeypatch.delenv("CHAOS_FAULT_TOKEN", raising=False)
    with start_server(["--preset", "tiny", "--enable-fault-hooks", "--replica-id", "tok"]) as s:
        assert s.fault_token and len(s.fault_token) >= 24
        assert admin(s.base_url, "GET")[0] == 401
        assert admin(s.base_url, "GET", headers={FAULT_HEADER: s.fault_token})[0] == 200
        assert not any(s.fault_token in line for line in s.output)
    with start_server(["--preset", "tiny", "--replica-id", "nohooks"]) as s:
        assert s.fault_token is None
        assert admin(s.base_url, "GET", headers={FAULT_HEADER: "x"})[0] == 404  # no fault routes at all


def run_cli(*args, env=None, timeout=120):
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "chaos", "reference", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


def test_fault_hooks_without_a_token_refuse_to_start():
    env = {k: v for k, v in os.environ.items() if k != "CHAOS_FAULT_TOKEN"}
    p = subprocess.run([sys.executable, "-m", "chaos", "reference", "serve", "--preset", "tiny", "--port", "0",
                        "--enable-fault-hooks"], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert p.returncode == 2, p.stderr
    assert "CHAOS_FAULT_TOKEN" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("command", [["serve", "--preset", "tiny"], ["gateway", "--upstream", "http://127.0.0.1:9"]])
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])  # the rest of the rule: test_loopback_hosts_need_no_flag
def test_a_non_loopback_host_is_refused_without_allow_remote(command, host):
    p = run_cli(*command, "--host", host, "--port", "0", timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--allow-remote" in p.stderr and "not a loopback address" in p.stderr and "Traceback" not in p.stderr


def test_loopback_hosts_need_no_flag():
    for host in ("127.0.0.1", "127.5.6.7", "::1", "[::1]", "localhost"):
        assert remote_host_error(host) is None, host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com", "", "127.attacker.example", "localhost.example"):
        assert remote_host_error(host), host

