"""When a rule acts: seeded probability, occurrences, count, window, match."""

from __future__ import annotations

import time

from .conftest import chat, request


def _pattern(proxy, n: int = 30, **kw) -> list[int]:
    return [chat(proxy.port, stream=False, **kw)[0] for _ in range(n)]


def test_seeded_probability_is_reproducible(make_proxy):
    rule = {"name": "p", "effect": "status", "params": {"status": 500}, "probability": 0.5, "seed": 7}
    a, b, c = make_proxy(), make_proxy(), make_proxy()
    a.add(rule)
    b.add(rule)
    c.add({**rule, "seed": 8})
    pa, pb, pc = _pattern(a), _pattern(b), _pattern(c)
    assert pa == pb and pa != pc
    assert 5 < pa.count(500) < 25  # about half
    assert a.rules()[0]["matched"] == 30 and a.rules()[0]["applied"] == pa.count(500)


def test_occurrences_and_count(proxy):
    proxy.add({"name": "o", "effect": "status", "params": {"status": 503}, "occurrences": [2, 4]})
    assert _pattern(proxy, 5) == [200, 503, 200, 503, 200]
    proxy.remove("o")
    proxy.add({"name": "c", "effect": "status", "params": {"status": 500}, "count": 2})
    assert _pattern(proxy, 4) == [500, 500, 200, 200]
    assert proxy.rules()[0]["applied"] == 2 and proxy.rules()[0]["matched"] == 4


def test_window(proxy):
    proxy.add({"name": "w", "effect": "status", "params": {"status": 500}, "window": {"start": 0.4, "end": 1.2}})
    t0 = time.monotonic()
    assert chat(proxy.port, stream=False)[0] == 200  # before the window
    time.sleep(max(0.0, 0.6 - (time.monotonic() - t0)))
    assert chat(proxy.port, stream=False)[0] == 500
    time.sleep(max(0.0, 1.5 - (time.monotonic() - t0)))
    assert chat(proxy.port, stream=False)[0] == 200


def test_match_on_method_path_model_and_stream(proxy):
    proxy.add({"name": "m", "effect": "status", "params": {"status": 403},
               "match": {"method": "POST", "path": "/v1/chat/*", "model": "big", "stream": True}})
    assert chat(proxy.port, model="big")[0] == 403
    assert chat(proxy.port, model="small")[0] == 200
    assert chat(proxy.port, stream=False, model="big")[0] == 200
    assert request(proxy.port, "GET", "/v1/chat/completions")[0] != 403
    assert request(proxy.port, "POST", "/echo", {"model": "big", "stream": True})[0] == 200
    assert proxy.rules()[0]["applied"] == 1
