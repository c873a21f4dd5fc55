"""The faults' calls to admin APIs over HTTP: the reference replicas' hooks (/admin/faults) and the LLM proxies'
rules (/__chaos/faults), each with the run's fault token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ..common import FAULT_TOKEN_HEADER


def call(method: str, url: str, body: dict | None = None, token: str | None = None) -> str | None:
    """None when it answered 2xx; else why not (its status and error code, or the connection error). For the
    replicas' hooks and for the LLM proxies' rules alike."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({FAULT_TOKEN_HEADER: token} if token else {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return None if 200 <= r.status < 300 else f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        code = None
        try:
            code = json.loads(e.read(4096) or b"{}").get("error", {}).get("code")
        except (ValueError, AttributeError, OSError):
            pass
        hint = " (the replica was started with another fault token, or none)" if e.code == 401 else \
            " (the replica has no fault hooks: --enable-fault-hooks)" if e.code == 404 else ""
        return f"HTTP {e.code}" + (f" {code}" if code else "") + hint
    except (urllib.error.URLError, OSError) as e:
        return f"unreachable: {getattr(e, 'reason', None) or e}"


def post_each(urls: list[str], path: str, body: dict, token: str | None) -> tuple[list[str], dict[str, str]]:
    """POST body to path on each URL: (the URLs that took it, {URL: why not} for those that refused). A fault
    counts for the ones that took it, and never happened when none did: the caller says which."""
    accepted, refused = [], {}
    for url in urls:
        why = call("POST", url + path, body, token)
        if why is None:
            accepted.append(url)
        else:
            refused[url] = why
    return accepted, refused
