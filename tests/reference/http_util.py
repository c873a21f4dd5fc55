"""Plain HTTP over loopback for the API tests: exact bytes, no client library in between."""

import http.client
import json
import os
from urllib.parse import urlparse

from chaos.common import FAULT_TOKEN_ENV
from chaos.common import FAULT_TOKEN_HEADER as FAULT_HEADER


def fault_headers(token: str | None = None) -> dict:
    """The header the fault routes need: this token, or the one in the environment, which is where
    start_server takes a replica's from. Under tests/reference, conftest.py's fault_token fixture puts one
    there for the package's tests; elsewhere there is none unless the caller set it."""
    token = token or os.environ.get(FAULT_TOKEN_ENV)
    return {FAULT_HEADER: token} if token else {}


def conn(base_url, timeout=30):
    u = urlparse(base_url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def request(base_url, method, path, body=None, headers=None, raw=None, timeout=30):
    c = conn(base_url, timeout)
    h = {"Content-Type": "application/json", **(fault_headers() if path.startswith("/admin/") else {}),
         **(headers or {})}
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    c.close()
    try:
        parsed = json.loads(payload) if payload else None
    except ValueError:
        parsed = payload.decode(errors="replace")
    return r.status, {k.lower(): v for k, v in r.getheaders()}, parsed


def post(base_url, path, body=None, **kw):
    return request(base_url, "POST", path, body, **kw)


def sse(base_url, path, body, headers=None, timeout=30):
    """POST and read an SSE stream to its end. Returns (status, headers, list of data payloads)."""
    c = conn(base_url, timeout)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json",
                                                                     **(headers or {})})
    r = c.getresponse()
    events = []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line.startswith("data: "):
            data = line[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, events


def metric(base_url, name):
    """The value of one unlabelled-by-us metric sample from /metrics."""
    _, _, text = request(base_url, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def open_stream(base_url, body, path="/v1/completions", wait_first=False):
    """Start a streamed request; (connection, response). With wait_first, return once one data line is read."""
    c = conn(base_url)
    c.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    while wait_first:
        line = r.readline().decode()
        if line.startswith("data: "):
            break
    return c, r


def read_rest(r):
    """The data payloads left in a stream, as strings, until it ends."""
    events = []
    while True:
        line = r.readline()
        if not line:
            return events
        line = line.decode().strip()
        if line.startswith("data: "):
            events.append(line[6:])
