"""JSON lines with text: OpenAI request bodies, {"timestamp", "request", "response"} envelopes, mapped logs.

Each parser turns one decoded JSON value into (stamp | None, Item) or a Problem. Bodies are kept as logged
(abnormal input is replayed as it came); only the log's own metadata (timestamp, case) leaves the body.
"""

from __future__ import annotations

import json

from .mapping import LogMapping, get_path
from .model import Item, Problem
from .times import parse_time

TIME_KEY = "timestamp"
_META_KEYS = (TIME_KEY, "case", "offset_s")


def _endpoint(body: dict, hint=None) -> str | None:
    if isinstance(hint, str) and hint:
        return "chat" if "chat" in hint.lower() else "completion"
    if "messages" in body:
        return "chat"
    if "prompt" in body:
        return "completion"
    return None


def _time(value, unit: str, line_no: int, fmt: str):
    if value is None:
        return None
    try:
        return parse_time(value, unit)
    except ValueError as err:
        return Problem(line_no, f"time: {err}", fmt)


def _int_or_none(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def _code(v) -> str | None:
    if v is None or isinstance(v, (dict, list)):
        return None
    return str(v)


def openai_item(line_no: int, e) -> tuple | Problem:
    if not isinstance(e, dict):
        return Problem(line_no, f"a line is a JSON object (an OpenAI request body), not {type(e).__name__}",
                       "openai")
    endpoint = _endpoint(e)
    if endpoint is None:
        return Problem(line_no, "no 'messages' (chat) nor 'prompt' (completions) in the body", "openai")
    stamp = _time(e.get(TIME_KEY), "s", line_no, "openai")
    if isinstance(stamp, Problem):
        return stamp
    body = {k: v for k, v in e.items() if k not in _META_KEYS}
    case = e.get("case") if isinstance(e.get("case"), str) else None
    return stamp, Item(line_no, None, endpoint, body, case=case, fmt="openai")


def envelope_item(line_no: int, e) -> tuple | Problem:
    req = e.get("request") if isinstance(e, dict) else None
    if not isinstance(req, dict):
        return Problem(line_no, "an envelope line has a 'request' object", "envelope")
    headers = req.get("headers") if isinstance(req.get("headers"), dict) else None
    hint = req.get("url") or req.get("path") or req.get("endpoint")
    body = req["body"] if "body" in req else req
    if isinstance(body, str):
        try:
            body = json.loads(body)  # some loggers keep the body as the raw string that was sent
        except ValueError:
            return Problem(line_no, "the request body is a string that is not JSON", "envelope")
    if not isinstance(body, dict):
        return Problem(line_no, f"the request body is {type(body).__name__}, not a JSON object", "envelope")
    if body is req:
        body = {k: v for k, v in req.items() if k not in ("headers", "url", "path", "endpoint", "method")}
    endpoint = _endpoint(body, hint if isinstance(hint, str) and ("/" in hint or "chat" in hint) else None)
    if endpoint is None or ("messages" not in body and "prompt" not in body):
        return Problem(line_no, "the request has no 'messages' (chat) nor 'prompt' (completions)", "envelope")
    stamp = _time(e.get(TIME_KEY, e.get("time")), "s", line_no, "envelope")
    if isinstance(stamp, Problem):
        return stamp
    status, code, n_in, n_out = _response(e.get("response"))
    case = e.get("case") if isinstance(e.get("case"), str) else None
    failed = (status is not None and status >= 400) or code is not None
    return stamp, Item(line_no, None, endpoint, body, n_in, n_out, status, code, failed=failed,
                       headers=headers, case=case, fmt="envelope")


def _response(resp) -> tuple:
    """(status, error_code, prompt_tokens, completion_tokens) of a logged response, each None if absent."""
    if not isinstance(resp, dict):
        return None, None, None, None
    status = _int_or_none(resp.get("status", resp.get("status_code")))
    rbody = resp.get("body")
    if isinstance(rbody, str):
        try:
            rbody = json.loads(rbody)
        except ValueError:
            rbody = None
    rbody = rbody if isinstance(rbody, dict) else {}
    code = _code(resp.get("error_code"))
    for err in (resp.get("error"), rbody.get("error")):
        if code is None and isinstance(err, dict):
            code = _code(err.get("code")) or _code(err.get("type"))
        elif code is None and isinstance(err, str):
            code = err
    usage = rbody.get("usage") or resp.get("usage") or {}
    usage = usage if isinstance(usage, dict) else {}
    return status, code, _int_or_none(usage.get("prompt_tokens")), _int_or_none(usage.get("completion_tokens"))


def mapped_item(line_no: int, e, m: LogMapping) -> tuple | Problem:
    if not isinstance(e, dict):
        return Problem(line_no, f"a line is a JSON object, not {type(e).__name__}", "mapped")
    body = {}
    if m.body:
        base = get_path(e, m.body)
        if isinstance(base, str):
            try:
                base = json.loads(base)
            except ValueError:
                base = None
        if not isinstance(base, dict):
            return Problem(line_no, f"no request object at {m.body!r}", "mapped")
        body = dict(base)
    for key, path in (("prompt", m.prompt), ("messages", m.messages), ("max_tokens", m.max_tokens)):
        if path:
            v = get_path(e, path)
            if v is not None:
                body[key] = v
    if "prompt" not in body and "messages" not in body:
        where = " or ".join(repr(p) for p in (m.prompt, m.messages) if p) or f"the body at {m.body!r}"
        return Problem(line_no, f"no prompt or messages at {where}", "mapped")
    endpoint = _endpoint(body, get_path(e, m.endpoint) if m.endpoint else None)
    stamp = _time(get_path(e, m.time), m.time_unit, line_no, "mapped") if m.time else None
    if isinstance(stamp, Problem):
        return stamp
    status = _int_or_none(get_path(e, m.status)) if m.status else None
    code = _code(get_path(e, m.error_code)) if m.error_code else None
    n_in = _int_or_none(get_path(e, m.input_tokens)) if m.input_tokens else None
    n_out = _int_or_none(get_path(e, m.output_tokens)) if m.output_tokens else None
    headers = get_path(e, m.headers) if m.headers else None
    case = get_path(e, m.case) if m.case else None
    failed = (status is not None and status >= 400) or code is not None
    return stamp, Item(line_no, None, endpoint, body, n_in, n_out, status, code, failed=failed,
                       headers=headers if isinstance(headers, dict) else None,
                       case=case if isinstance(case, str) else None, fmt="mapped")
