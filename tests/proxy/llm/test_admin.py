"""The /__chaos/ API: health, rules CRUD, validation naming the field, the token."""

from __future__ import annotations

import http.client
import json

import pytest

from chaos.common import FAULT_TOKEN_HEADER
from chaos.proxy.llm.rules import Rule

from .conftest import chat, request


def test_health_and_rule_lifecycle(proxy):
    assert request(proxy.port, "GET", "/__chaos/health")[:3:2] == (200, b'{"status": "ok"}')
    stored = proxy.add({"name": "s1", "effect": "status", "params": {"status": 503, "retry_after": 2},
                        "match": {"path": "/v1/*"}})
    assert stored["matched"] == 0 and stored["applied"] == 0 and stored["params"]["status"] == 503
    status, _, body = request(proxy.port, "POST", "/__chaos/faults", {"name": "s1", "effect": "close"})
    assert status == 409 and "s1" in json.loads(body)["error"]
    assert chat(proxy.port)[0] == 503
    assert request(proxy.port, "GET", "/echo")[0] == 200  # the path does not match
    [rule] = proxy.rules()
    assert (rule["name"], rule["matched"], rule["applied"]) == ("s1", 1, 1)
    proxy.add({"name": "s2", "effect": "close"})
    assert request(proxy.port, "DELETE", "/__chaos/faults/nope")[0] == 404
    proxy.remove("s1")
    assert [r["name"] for r in proxy.rules()] == ["s2"]
    assert request(proxy.port, "DELETE", "/__chaos/faults")[0] == 204
    assert proxy.rules() == [] and chat(proxy.port)[0] == 200


def test_the_openapi_document_is_what_the_admin_api_answers(proxy):
    """Served without a token, valid OpenAPI 3.1; each documented operation gets a documented status on the real
    proxy, a stored rule is valid against StoredRule, and every other method is 405 with the documented ones in
    Allow (RFC 9110)."""
    status, _, body = request(proxy.port, "GET", "/__chaos/openapi.json")
    assert status == 200
    doc = json.loads(body)
    pytest.importorskip("openapi_spec_validator").validate(doc)
    jsonschema = pytest.importorskip("jsonschema")
    stored = {**doc["components"]["schemas"]["StoredRule"], "components": doc["components"]}
    rule = {"name": "doc1", "effect": "status", "params": {"status": 503}, "match": {"path": "/v1/*"}, "count": 2}
    jsonschema.validate(rule, {**doc["components"]["schemas"]["Rule"]})
    assert set(doc["components"]["schemas"]["Rule"]["properties"]) == Rule.KEYS  # every field the proxy takes
    calls = {("post", "/__chaos/faults"): (rule, 201), ("get", "/__chaos/faults/{name}"): (None, 200),
             ("get", "/__chaos/faults"): (None, 200), ("delete", "/__chaos/faults/{name}"): (None, 204),
             ("delete", "/__chaos/faults"): (None, 204), ("get", "/__chaos/health"): (None, 200),
             ("get", "/__chaos/openapi.json"): (None, 200)}
    documented = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert documented == set(calls)
    for (method, path), (body, want) in calls.items():  # in the order above: the rule exists when it is read
        status, _, got = request(proxy.port, method.upper(), path.replace("{name}", "doc1"), body)
        assert status == want and str(want) in doc["paths"][path][method]["responses"], (method, path, status)
        if (method, path) in (("post", "/__chaos/faults"), ("get", "/__chaos/faults/{name}")):
            jsonschema.Draft202012Validator(stored).validate(json.loads(got))
    for path, item in doc["paths"].items():
        allow = ", ".join(m for m in ("GET", "HEAD", "POST", "DELETE") if m.replace("HEAD", "GET").lower() in item)
        for method in {"GET", "POST", "DELETE", "PUT", "PATCH", "TRACE"} - set(allow.split(", ")):
            status, headers, got = request(proxy.port, method, path.replace("{name}", "doc1"), {})
            assert status == 405 and headers["allow"] == [allow], (method, path, status, headers)
            assert "not allowed" in json.loads(got)["error"]


def test_head_is_get_without_the_body(proxy):
    """On a kept-alive connection: a HEAD's answer has GET's head and no body, so the next answer reads clean."""
    c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    for path in ("/__chaos/health", "/__chaos/openapi.json", "/__chaos/faults"):
        get = request(proxy.port, "GET", path)
        status, headers, body = request(proxy.port, "HEAD", path, conn=c)
        assert (status, body) == (get[0], b"") and headers["content-length"] == get[1]["content-length"], path
    status, headers, body = request(proxy.port, "HEAD", "/__chaos/faults/none", conn=c)
    assert (status, body) == (404, b"")
    assert request(proxy.port, "POST", "/__chaos/health", conn=c)[0] == 405  # the connection still reads clean
    c.close()


@pytest.mark.parametrize("rule,field", [
    ({"name": "x", "effect": "nope"}, "effect"),
    ({"name": "x", "effect": "status", "params": {"status": 418}}, "params.status"),
    ({"name": "x", "effect": "stall", "params": {"after": 1}}, "params.after"),
    ({"name": "x", "effect": "status", "probability": 2}, "probability"),
    ({"name": "x", "effect": "status", "occurrences": [0]}, "occurrences"),
    ({"name": "x", "effect": "status", "count": 0}, "count"),
    ({"name": "x", "effect": "status", "window": {"start": 5, "end": 1}}, "window.end"),
    ({"name": "x", "effect": "status", "match": {"path": "v1"}}, "match.path"),
    ({"name": "x", "effect": "status", "match": {"stream": "yes"}}, "match.stream"),
    ({"name": "a b", "effect": "status"}, "name"),
    ({"name": "x", "effect": "status", "colour": 1}, "colour"),
    # found by schemathesis (tests/proxy/llm/test_schemathesis.py): each was a 201, or a dropped connection
    ({"name": "x", "effect": ["status"]}, "effect"),
    ({"name": "x", "effect": "status", "match": False}, "match"),
    ({"name": "x", "effect": "status", "params": 0}, "params"),
    ({"name": "x\n", "effect": "status"}, "name"),
    ({"name": "x", "effect": "status", "match": {"method": "po\u017ft"}}, "match.method"),  # upper(): POST
])
def test_bad_rule_is_a_400_naming_the_field(proxy, rule, field):
    status, _, body = request(proxy.port, "POST", "/__chaos/faults", rule)
    assert status == 400
    assert json.loads(body)["error"].startswith(field)


def test_whole_floats_are_integers_and_null_is_the_default(proxy):
    """As the document's JSON Schema reads them: 2.0 is the integer 2, and a null param is an absent one."""
    stored = proxy.add({"name": "w", "effect": "status", "seed": 3.0, "count": 2.0, "occurrences": [1.0, 2],
                        "params": {"status": 503.0, "retry_after": None, "message": None}, "match": None})
    assert (stored["seed"], stored["count"], stored["occurrences"]) == (3, 2, [1, 2])
    assert stored["params"]["status"] == 503 and stored["params"]["message"].startswith("The engine is")
    status, head, _ = chat(proxy.port)
    assert status == 503 and "retry-after" not in head
    assert proxy.add({"name": "d", "effect": "delay", "params": {"delay_s": None}})["params"]["delay_s"] == 1.0
    big = proxy.add({"name": "late", "effect": "close", "window": {"start": 1e188, "end": 1e307}})["window"]
    assert big == {"start": 1e188, "end": 1e307}  # was {"start": null, "end": null}: 1e17 and up read as no end
    assert proxy.add({"name": "open", "effect": "close", "window": {"start": 1}})["window"] == {"start": 1, "end": None}


def test_not_json_is_a_400(proxy):
    status, _, body = request(proxy.port, "POST", "/__chaos/faults", b"{nope")
    assert status == 400 and "JSON" in json.loads(body)["error"]


def test_token_protects_the_admin_api(make_proxy):
    p = make_proxy(token="s3cret")
    rule = {"name": "t", "effect": "close"}
    assert request(p.port, "POST", "/__chaos/faults", rule)[0] == 401
    assert request(p.port, "GET", "/__chaos/faults", headers={FAULT_TOKEN_HEADER: "wrong"})[0] == 401
    assert request(p.port, "GET", "/__chaos/health")[0] == 200
    assert request(p.port, "POST", "/__chaos/faults", rule, headers={FAULT_TOKEN_HEADER: "s3cret"})[0] == 201
    assert request(p.port, "DELETE", "/__chaos/faults/t")[0] == 401
    assert [r["name"] for r in json.loads(request(p.port, "GET", "/__chaos/faults",
                                                  headers={FAULT_TOKEN_HEADER: "s3cret"})[2])] == ["t"]
