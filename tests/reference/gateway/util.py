"""What the gateway tests share: starting replicas and gateways, fault hooks, the gateway's state."""

import json

from chaos.common import FAULT_TOKEN_HEADER
from chaos.reference.launcher import start_server

from ..http_util import post, request

M = "chaos-reference"
BODY = {"model": M, "prompt": "gateway", "max_tokens": 6, "temperature": 0, "ignore_eos": True}


def replicas(n, *extra, prefix="r"):
    return [start_server(["--preset", "tiny", "--replica-id", f"{prefix}{i}", "--enable-fault-hooks", *extra])
            for i in range(n)]


def stop(*servers):
    for s in servers:
        s.stop()


def settings(**kw):
    return ["--settings", json.dumps({"health_interval_s": 0.2, **kw})]


def _token(r) -> dict:
    token = getattr(r, "fault_token", None)  # replicas that want one get it from start_server
    return {FAULT_TOKEN_HEADER: token} if token else {}


def fault(r, spec: dict):
    status, _, body = post(r.base_url, "/admin/faults", spec, headers=_token(r))
    assert status == 200, body


def unfault(r):
    status, _, body = request(r.base_url, "DELETE", "/admin/faults", headers=_token(r))
    assert status == 200, body


def state(gw) -> dict:
    return request(gw.base_url, "GET", "/gateway/state")[2]


def gateway_args(upstreams: dict[str, str], **kw) -> list[str]:
    """Arguments for start_gateway([], args=...) in front of upstreams given by URL (stubs)."""
    out = []
    for name, url in upstreams.items():
        out += ["--upstream", f"{name}={url}"]
    return [*out, *settings(**kw)]
