"""Effects on the generated text, streamed and not."""

from __future__ import annotations

import json

from .conftest import chat, contents

TEXT = 'Hello World, 42 times: {"a": [1, 2]} ok'


def _plain(proxy, **kw) -> dict:
    kw.setdefault("content", TEXT)
    status, h, body = chat(proxy.port, stream=False, **kw)
    assert status == 200 and len(h["x-chaos-fault"]) == 1
    assert h["content-length"] == [str(len(body))]
    return json.loads(body)["choices"][0]["message"]


def _streamed(proxy, content: str = TEXT) -> str:
    status, h, body = chat(proxy.port, content=content)
    assert status == 200 and len(h["x-chaos-fault"]) == 1 and body.endswith(b"data: [DONE]\n\n")
    return "".join(contents(body))


def test_replace_text(proxy):
    proxy.add({"name": "r", "effect": "replace_text", "params": {"text": "REPLACED"}})
    assert _plain(proxy)["content"] == "REPLACED"
    assert _streamed(proxy) == "REPLACED"
    assert proxy.log(2)[1]["detail"] == "replaced the text"


def test_garble_keeps_the_shape(proxy):
    proxy.add({"name": "g", "effect": "garble", "seed": 3})
    for got in (_plain(proxy)["content"], _streamed(proxy)):
        assert got != TEXT and len(got) == len(TEXT)
        for a, b in zip(got, TEXT, strict=True):
            assert a.isspace() == b.isspace() and a.isupper() == b.isupper() and a.isdigit() == b.isdigit()
            if not b.isalnum():
                assert a == b


def test_enlarge(proxy):
    proxy.add({"name": "e", "effect": "enlarge", "params": {"factor": 3}})
    assert _plain(proxy)["content"] == TEXT * 3
    assert len(_streamed(proxy)) == 3 * len(TEXT)


def test_break_json_content_and_tool_arguments(upstream, proxy):
    proxy.add({"name": "b", "effect": "break_json"})
    doc = '{"answer": [1, 2], "ok": true}'
    for broken in (_plain(proxy, content=doc)["content"], _streamed(proxy, doc)):
        assert len(broken) == len(doc) + 1
        try:
            json.loads(broken)
            raise AssertionError(f"still valid JSON: {broken!r}")
        except ValueError:
            pass
    msg = _plain(proxy, tools=[{"type": "function", "function": {"name": "f"}}])
    args = msg["tool_calls"][0]["function"]["arguments"]
    assert args != '{"city": "Paris"}'
    try:
        json.loads(args)
        raise AssertionError("arguments still valid JSON")
    except ValueError:
        pass
