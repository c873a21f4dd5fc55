"""One list of hostile HTTP requests, and what a good OpenAI-compatible server answers to each.

Every case is one request: malformed or extreme sampling parameters (at their type's extremes, NaN and infinity),
lone surrogates, bodies too large or nested too deep, wrong types, unknown fields, empty input, input over the
context. A good server answers each with the status in `expect` (a clear 4xx, or 200 where the input is extreme
but valid), names the field in error.param where `param` is given, stays up, and leaks nothing. The reference
server's tests iterate it directly, the gateway's through the gateway, and `chaos selftest hostile` on any target.

Only the standard library: no torch, nothing of chaos.reference.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlparse

JSON = {"Content-Type": "application/json"}
MB = 2**20


@dataclass(frozen=True, slots=True)
class HostileCase:
    name: str
    method: str
    path: str
    body: bytes | Callable[[], bytes] = b""  # a callable for the huge ones, built only when sent
    headers: dict = field(default_factory=lambda: dict(JSON))
    expect: tuple[int, ...] = (400,)  # the statuses a good server answers
    param: str | None = None  # error.param a good server names (checked only when given)
    chunked: bool = False  # send the body with Transfer-Encoding: chunked (no Content-Length)

    def payload(self) -> bytes:
        return self.body() if callable(self.body) else self.body

    def chunks(self, size: int = MB) -> Iterator[bytes]:
        data = self.payload()
        for i in range(0, len(data), size):
            yield data[i:i + size]


def _nest(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def hostile_cases(model: str = "chaos-reference", max_model_len: int = 1024) -> list[HostileCase]:
    """The cases for a server that serves `model` with a context of `max_model_len` tokens."""
    cases: list[HostileCase] = []
    comp, chat = "/v1/completions", "/v1/chat/completions"
    base = {"model": model, "prompt": "hi", "max_tokens": 2}
    chat_base = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

    def add(name, path, body, expect=(400,), param=None, headers=None, chunked=False, method="POST"):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        cases.append(HostileCase(name, method, path, body, dict(JSON) if headers is None else headers, expect,
                                 param, chunked))

    def field_case(name, value, param=None, expect=(400,), path=comp, **extra):
        b = dict(base if path == comp else chat_base)
        b.update(extra)
        b[name] = value
        add(f"{'chat' if path == chat else 'completions'} {name}={json.dumps(value)[:32]}", path, b, expect,
            param if param is not None else (name if expect == (400,) else None))

    def literal_case(name, literal, param=None, path=comp, value=None):
        # A value json.dumps cannot write (NaN, Infinity, 1e999, a 5000-digit integer): spliced in as text
        # where the placeholder stands (value: what holds it, for a nested field such as logit_bias).
        hole = "@@literal@@"
        b = {**(base if path == comp else chat_base), name: hole if value is None else value(hole)}
        text = json.dumps(b).replace(json.dumps(hole), literal)
        add(f"{'chat' if path == chat else 'completions'} {name}={literal[:24]}", path, text, (400,), param)

    # -- item 1: sampling parameters at their type's extremes -------------------------------------------
    for v in (2**64, -2**63 - 1, 10**30, 1.5, "7", True, [1]):
        field_case("seed", v)
    for v in (2**64 - 1, -2**63, 0):
        field_case("seed", v, expect=(200,), temperature=1.0)
    for v in (-0.1, 2.0001, 1e308, -1e308, "hot", [], {}):
        field_case("temperature", v)
    for v in (0, -1, 1.0000001, 1e308, "x"):
        field_case("top_p", v)
    for v in (-2, 1.5, "x", True):
        field_case("top_k", v)
    for v in (2**63, 10**30, -1, 0, 1):
        field_case("top_k", v, expect=(200,), temperature=1.0)
    for v in (0, 2, -1, 10**30, 1.5, "1"):
        field_case("n", v)
    for v in (0, -1, 10**30, 2**63, 1.5, "ten", max_model_len + 1):
        field_case("max_tokens", v)
    for v in (-1, 6, 10**30, 1, "x", True):
        field_case("logprobs", v)
    for v in (True, "yes", 1):
        field_case("logprobs", v, path=chat)
    for v in (5, 21, -1, 10**30):
        field_case("top_logprobs", v, path=chat)
    for v in (["a", "b", "c", "d", "e"], [""], "", 5, [1], {"a": 1}, "x" * (max_model_len + 1)):
        field_case("stop", v)
    for v in ({"x": 1}, {str(10**12): 1}, {"-1": 1}, [], "x", {"65": 5}):
        field_case("logit_bias", v)
    field_case("logit_bias", {"65": 1e308}, param="logit_bias.65")
    field_case("logit_bias", {"65": "x"}, param="logit_bias.65")
    field_case("logit_bias", {}, expect=(200,))
    for name in ("presence_penalty", "frequency_penalty"):
        for v in (2.5, -1e308, "x"):
            field_case(name, v)
    field_case("best_of", 2)
    field_case("echo", True)
    field_case("suffix", "tail")
    field_case("stream", "yes")
    field_case("stream_options", 1)
    field_case("stream_options", {"include_usage": "y"}, param="stream_options.include_usage")
    field_case("ignore_eos", "true")
    for name, literal in (("temperature", "NaN"), ("top_p", "Infinity"), ("max_tokens", "-Infinity"),
                          ("seed", "NaN"), ("temperature", "1e999"), ("top_p", "-1e999"),
                          ("max_tokens", "1" * 5000), ("seed", "-" + "9" * 5000)):
        literal_case(name, literal, param=name if "e999" in literal else None)
    # Integers past float's range in number fields, and past any context in token counts (4,300 digits is
    # the most Python's JSON parser reads): a 400 naming the field, not an overflow.
    huge, nines = "1" + "0" * 400, "9" * 4300
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        literal_case(name, huge, param=name)
    literal_case("frequency_penalty", "-" + huge, param="frequency_penalty")
    literal_case("logit_bias", huge, param="logit_bias.65", value=lambda hole: {"65": hole})
    literal_case("max_tokens", nines, param="max_tokens")
    literal_case("max_completion_tokens", nines, param="max_completion_tokens", path=chat)
    literal_case("max_tokens", nines, param="max_tokens", path=chat)

    # -- item 2: lone surrogates, in every string the server reads --------------------------------------
    s = "ok \ud800 ok"
    add("completions prompt with a lone surrogate", comp, {**base, "prompt": s}, param="prompt")
    add("completions prompt [str] with a lone surrogate", comp, {**base, "prompt": [s]}, param="prompt")
    add("chat content with a lone surrogate", chat, {**chat_base, "messages": [{"role": "user", "content": s}]},
        param="messages[0].content")
    add("chat content part with a lone surrogate", chat, {**chat_base, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "\udfff"}]}]},
        param="messages[1].content[1].text")
    add("stop string with a lone surrogate", comp, {**base, "stop": "\ud800"}, param="stop")
    add("stop list with a lone surrogate", comp, {**base, "stop": ["ok", "\udbff"]}, param="stop[1]")

    # -- items 3, 4: size and depth ---------------------------------------------------------------------
    big = lambda: json.dumps({**base, "pad": "y" * (33 * MB)}).encode()
    cases.append(HostileCase("body of 33 MB (Content-Length)", "POST", comp, big, expect=(413,)))
    cases.append(HostileCase("body of 33 MB (chunked)", "POST", comp, big, expect=(413,), chunked=True))
    cases.append(HostileCase("20 MB prompt (over the context)", "POST", comp,
                             lambda: json.dumps({**base, "prompt": "x" * (20 * MB)}).encode(), param="prompt"))
    cases.append(HostileCase("5M token ids (over the context)", "POST", comp,
                             lambda: json.dumps({**base, "prompt": [65] * (5 * 10**6)}).encode(), param="prompt"))
    cases.append(HostileCase("20 MB unknown field, small prompt", "POST", comp,
                             lambda: json.dumps({**base, "pad": "y" * (20 * MB)}).encode(), expect=(200,)))
    add("body nested 1,000 deep", comp, _nest(1000))
    add("body nested 100,000 deep", comp, _nest(100_000))
    add("field nested 1,000 deep", comp, json.dumps(base)[:-1] + ', "x": ' + _nest(1000) + "}")
    add("temperature nested 900 deep", comp, json.dumps(base)[:-1] + ', "temperature": ' + _nest(900) + "}")
    add("object nested 1,000 deep", comp, '{"a": ' * 1000 + "1" + "}" * 1000)
    add("field nested 30 deep (allowed)", comp, json.dumps(base)[:-1] + ', "x": ' + _nest(30) + "}", (200,))

    # -- malformed bodies and content types ---------------------------------------------------------------
    ok = json.dumps(base)
    add("invalid JSON", comp, "{not json")
    add("empty body", comp, b"")
    add("JSON array body", comp, "[1, 2]")
    add("JSON string body", comp, '"hi"')
    add("trailing garbage", comp, ok + " x")
    add("invalid UTF-8", comp, b'{"model": "' + model.encode() + b'", "prompt": "\xff\xfe"}')
    add("UTF-8 BOM", comp, b"\xef\xbb\xbf" + ok.encode())
    add("UTF-16 body", comp, ok.encode("utf-16"))
    add("text/plain content type", comp, ok, headers={"Content-Type": "text/plain"})
    add("no content type", comp, ok, headers={})
    add("form content type", comp, "model=x&prompt=hi", headers={"Content-Type": "application/x-www-form-urlencoded"})

    # -- wrong types, empty input, unknown fields, the model ----------------------------------------------
    for v, param in ((5, "prompt"), ([1.5], "prompt"), ([-1], "prompt"), ([10**6], "prompt"), (["a", "b"], "prompt"),
                     ("", "prompt"), ([], "prompt"), ({"text": "hi"}, "prompt"), (None, "prompt")):
        add(f"completions prompt={json.dumps(v)[:24]}", comp, {**base, "prompt": v}, param=param)
    for msgs, param in (("hi", "messages"), ([5], "messages[0]"), ([], "messages"), (None, "messages"),
                        ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
                        ([{"role": "user", "content": 5}], "messages[0].content"),
                        ([{"role": "user", "content": ""}], "messages"),
                        ([{"role": "user"}], "messages[0].content"),
                        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                         "messages[0].content[0]")):
        add(f"chat messages={json.dumps(msgs)[:32]}", chat, {**chat_base, "messages": msgs}, param=param)
    add("model missing", comp, {"prompt": "hi"}, param="model")
    add("model of the wrong type", comp, {**base, "model": 5}, param="model")
    add("unknown model", comp, {**base, "model": "gpt-9"}, expect=(404,), param="model")
    add("unknown model with a lone surrogate", comp, {**base, "model": "\ud800"}, expect=(404,), param="model")
    add("unknown fields", comp, {**base, "frobnicate": {"a": [1, {"b": None}]}, "user": "u"}, expect=(200,))

    # -- the context limit --------------------------------------------------------------------------------
    add("prompt over the context", comp, {**base, "prompt": "x" * (max_model_len + 10), "max_tokens": None},
        param="prompt")
    add("token ids over the context", comp, {**base, "prompt": [65] * max_model_len, "max_tokens": None},
        param="prompt")
    add("chat over the context", chat, {**chat_base, "max_tokens": None,
                                        "messages": [{"role": "user", "content": "y" * (max_model_len + 10)}]},
        param="messages")
    add("max_tokens pushing past the context", comp, {**base, "prompt": "x" * (max_model_len - 20), "max_tokens": 40},
        param="max_tokens")
    add("max_completion_tokens pushing past the context", chat,
        {**chat_base, "messages": [{"role": "user", "content": "x" * (max_model_len - 40)}],
         "max_completion_tokens": 60}, param="max_completion_tokens")

    # -- routes -------------------------------------------------------------------------------------------
    add("unknown route", "/v1/nothing", ok, expect=(404,))
    add("GET on a POST route", comp, b"", expect=(405,), method="GET")
    add("fault route without a token", "/admin/faults", {"crash": True}, expect=(401, 404))
    add("fault route with a wrong token", "/admin/faults", {"crash": True}, expect=(401, 404),
        headers={**JSON, "x-chaos-fault-token": "not-the-token"})
    add("fault list without a token", "/admin/faults", b"", expect=(401, 404), method="GET")
    return cases


def send(case: HostileCase, base_url: str, timeout: float = 60.0, headers: dict | None = None):
    """Send one case over plain HTTP/1.1: (status, lowercased headers, parsed JSON body or text). status is None
    when the connection broke before any answer (a good server always answers). headers are added (a token)."""
    u = urlparse(base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    h = {**case.headers, **(headers or {})}
    try:
        try:
            if case.chunked:
                c.request(case.method, case.path, body=case.chunks(), headers=h, encode_chunked=True)
            else:
                c.request(case.method, case.path, body=case.payload(), headers=h)
        except OSError as e:
            if c.sock is None:  # never connected: there is no answer to read
                return None, {}, repr(e)
            # else the server may answer (413) and stop reading before the body is sent: read its answer
        try:
            r = c.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException) as e:
            return None, {}, repr(e)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, parsed
    finally:
        c.close()
