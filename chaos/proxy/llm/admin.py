"""The control API under /__chaos/ on the proxy's own port: health, and the fault rules."""

from __future__ import annotations

import hmac
import json

from chaos.common import FAULT_TOKEN_HEADER

from .openapi import admin_spec
from .rules import RuleError

PREFIX = "/__chaos/"


def is_admin(path: str) -> bool:
    return path.startswith(PREFIX) or path == PREFIX.rstrip("/")


def allowed(path: str) -> str:
    """The methods a path takes, for a 405's Allow header: the ones its OpenAPI document lists, and HEAD with
    GET."""
    parts = path.rstrip("/").split("/")
    route = "/".join(parts[:3] + ["{name}"] * (len(parts) > 3))
    methods = [m.upper() for m in admin_spec()["paths"].get(route, {})]
    return ", ".join(m for g in methods for m in ((g, "HEAD") if g == "GET" else (g,)))


def handle(proxy, method: str, path: str, token: str | None, body: bytes) -> tuple[int, object]:
    """(status, JSON-able body or None for no body). token: what the request carried in FAULT_TOKEN_HEADER.
    HEAD is answered as GET (the server sends no body for it)."""
    method = "GET" if method == "HEAD" else method
    if path.rstrip("/") == "/__chaos/health":
        if method != "GET":
            return 405, {"error": f"{method} not allowed on /__chaos/health ({allowed(path)})"}
        return 200, {"status": "ok"}  # open even with a token: it tells nothing, and probes carry no secrets
    if path == "/__chaos/openapi.json":  # open too: the document holds no state
        if method != "GET":
            return 405, {"error": f"{method} not allowed on /__chaos/openapi.json ({allowed(path)})"}
        return 200, admin_spec()
    if proxy.token is not None and not hmac.compare_digest((token or "").encode(), proxy.token.encode()):
        return 401, {"error": f"missing or wrong {FAULT_TOKEN_HEADER} header: send the token the proxy was "
                              "started with (its CHAOS_FAULT_TOKEN)"}
    parts = path.rstrip("/").split("/")  # ['', '__chaos', 'faults', name?]
    if len(parts) < 3 or parts[2] != "faults" or len(parts) > 4:
        return 404, {"error": f"no such admin path {path!r}: use /__chaos/health or /__chaos/faults[/NAME]"}
    if len(parts) == 3:
        if method == "GET":
            return 200, [r.to_dict() for r in proxy.rules()]
        if method == "POST":
            try:
                spec = json.loads(body or b"null")
            except ValueError as e:
                return 400, {"error": f"body: not JSON ({e})"}
            try:
                rule = proxy.add_rule(spec)
            except KeyError as e:
                return 409, {"error": str(e.args[0])}
            except RuleError as e:
                return 400, {"error": str(e)}
            return 201, rule.to_dict()
        if method == "DELETE":
            proxy.clear_rules()
            return 204, None
        return 405, {"error": f"{method} not allowed on /__chaos/faults ({allowed(path)})"}
    name = parts[3]
    if method == "GET":
        rule = proxy.get_rule(name)
        return (200, rule.to_dict()) if rule else (404, {"error": f"no rule named {name!r}"})
    if method == "DELETE":
        try:
            proxy.remove_rule(name)
        except KeyError:
            return 404, {"error": f"no rule named {name!r}"}
        return 204, None
    return 405, {"error": f"{method} not allowed on /__chaos/faults/NAME ({allowed(path)})"}
