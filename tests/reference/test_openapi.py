"""GET /openapi.json: a valid OpenAPI 3.1 document that names every route the app registers, and whose ranges are
the ones the server enforces (probed on a real replica, so the document cannot drift from the code)."""

import pytest

from chaos.reference.openapi import gateway_spec, server_spec
from chaos.reference.protocol import CHAT_ROLES

from .http_util import post, request

M = "chaos-reference"
METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}


def documented(spec: dict) -> set[tuple[str, str]]:
    return {(m.upper(), path) for path, item in spec["paths"].items() for m in item if m in METHODS}


def registered(app) -> set[tuple[str, str]]:
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


@pytest.fixture(scope="module")
def live_spec(server):
    status, headers, spec = request(server.base_url, "GET", "/openapi.json")
    assert status == 200 and headers["content-type"].startswith("application/json")
    return spec


def test_the_served_document_is_valid_openapi_3_1(live_spec):
    assert live_spec["openapi"] == "3.1.0"
    for path, item in live_spec["paths"].items():  # structure, with or without the validator
        for method, op in item.items():
            assert op["responses"], (method, path)
            for status, resp in op["responses"].items():
                assert resp["description"], (method, path, status)
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(live_spec)
    validator.validate(server_spec(max_model_len=8192))  # without fault hooks
    validator.validate(gateway_spec(max_model_len=1024, model_names=[M], extra_paths={"/extra": {"get": {
        "responses": {"200": {"description": "ok"}}}}}))


@pytest.mark.parametrize("hooks", [True, False])
def test_every_registered_route_is_documented_and_nothing_else(hooks):
    from chaos.reference.api import ReferenceAPI, ServerSettings
    from chaos.reference.config import EngineConfig, preset
    from chaos.reference.engine.async_engine import AsyncEngine

    api = ReferenceAPI(ServerSettings(enable_fault_hooks=hooks, fault_token="t" if hooks else None),
                       AsyncEngine(EngineConfig(model=preset("tiny"), max_model_len=1024)))
    try:
        assert registered(api.build_app()) == documented(api.spec)
        assert (("POST", "/admin/faults") in documented(api.spec)) == hooks
    finally:
        api.close()


def test_every_documented_route_answers_on_the_real_server(server, live_spec):
    for method, path in documented(live_spec):
        if method != "GET":
            continue
        status = request(server.base_url, method, path)[0]
        assert status == 200, (method, path, status)


def test_the_served_model_name_is_declared_so_fuzzers_reach_the_engine(server, live_spec):
    schemas = live_spec["components"]["schemas"]
    for path, kind, base in (("/v1/completions", "CompletionRequest", {"prompt": "hi", "max_tokens": 2}),
                             ("/v1/chat/completions", "ChatCompletionRequest",
                              {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})):
        names = schemas[kind]["properties"]["model"]["enum"]
        assert names == [M]
        assert post(server.base_url, path, {**base, "model": names[0]})[0] == 200
        assert post(server.base_url, path, {**base, "model": M + "-other"})[0] == 404  # the declared 404


def test_every_error_response_is_the_documented_error_shape(live_spec):
    error = live_spec["components"]["schemas"]["Error"]["properties"]["error"]
    assert set(error["required"]) == {"message", "type", "param", "code"}
    gen = live_spec["paths"]["/v1/completions"]["post"]["responses"]
    for status in ("400", "404", "408", "413", "429", "500", "503"):
        assert gen[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert "retry-after" in gen["429"]["headers"] and "retry-after-ms" in gen["429"]["headers"]


def bounds(schema: dict) -> list[tuple[object, bool]]:
    """(value, accepted) pairs at and just past each documented bound of a number or integer field."""
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    step = 1 if "integer" in types else 1e-6
    out = []
    if "minimum" in schema:
        out += [(schema["minimum"], True), (schema["minimum"] - step, False)]
    if "exclusiveMinimum" in schema:
        out += [(schema["exclusiveMinimum"], False), (schema["exclusiveMinimum"] + step, True)]
    if "maximum" in schema:
        out += [(schema["maximum"], True), (schema["maximum"] + step, False)]
    return out


@pytest.mark.parametrize("path,schema_name,base", [
    ("/v1/completions", "CompletionRequest", {"model": M, "prompt": "hi", "max_tokens": 2}),
    ("/v1/chat/completions", "ChatCompletionRequest",
     {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
])
def test_the_documented_ranges_are_the_enforced_ones(server, live_spec, path, schema_name, base):
    props = live_spec["components"]["schemas"][schema_name]["properties"]
    probed = 0
    for name, schema in props.items():
        if name in ("max_tokens", "max_completion_tokens"):
            continue  # their bound depends on the prompt's length; test_api_errors covers the context
        for value, accepted in bounds(schema):
            status, _, body = post(server.base_url, path, {**base, name: value})
            assert (status == 200) == accepted, (name, value, status, body)
            if not accepted:
                assert status == 400 and body["error"]["param"] == name, (name, value, body)
            probed += 1
    assert probed >= 20
    stop = props["stop"]["oneOf"][1]["maxItems"]
    assert post(server.base_url, path, {**base, "stop": ["z"] * stop})[0] == 200
    assert post(server.base_url, path, {**base, "stop": ["z"] * (stop + 1)})[0] == 400
    assert post(server.base_url, path, {**base, "logit_bias": {}})[0] == 200
    assert post(server.base_url, path, {**base, "logit_bias": {"65": 1}})[0] == 400



PROBES = (None, True, 1, 1.5, 2.0, "s", [], {})  # one value of each JSON type; 2.0 is an integer to JSON Schema


def schema_accepts(live_spec, schema_name: str):
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(live_spec["components"]["schemas"][schema_name]).is_valid


@pytest.mark.parametrize("path,schema_name,base", [
    ("/v1/completions", "CompletionRequest", {"model": M, "prompt": "hi", "max_tokens": 2}),
    ("/v1/chat/completions", "ChatCompletionRequest",
     {"model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
])
def test_the_documented_types_and_nulls_are_the_accepted_ones(server, live_spec, path, schema_name, base):
    """Every field given each JSON type in turn: the server takes it exactly when the document does (a null the
    server reads as absent but the document forbids, or a type it ignores but the document narrows, fails)."""
    valid = schema_accepts(live_spec, schema_name)
    drift = []
    for name in live_spec["components"]["schemas"][schema_name]["properties"]:
        if name == "model":
            continue  # any other string is an unknown model (404), which no schema can say
        for value in PROBES:
            body = {**base, name: value}
            status = post(server.base_url, path, body)[0]
            if (status == 200) != valid(body):
                drift.append(f"{name}={value!r}: server {status}, document {'accepts' if valid(body) else 'refuses'}")
    assert not drift, drift


def test_token_ids_written_as_whole_floats_are_token_ids(server, live_spec):
    valid = schema_accepts(live_spec, "CompletionRequest")
    for prompt, accepted in (([72.0, 105], True), ([[72.0, 105.0]], True), ([72.5], False), ([True], False)):
        body = {"model": M, "prompt": prompt, "max_tokens": 2}
        assert (post(server.base_url, "/v1/completions", body)[0] == 200) == valid(body) == accepted, prompt


def test_a_chat_needs_one_message_that_says_something_exactly_as_documented(server, live_spec):
    valid = schema_accepts(live_spec, "ChatCompletionRequest")
    for messages in ([{"role": "user", "content": ""}], [{"role": "assistant", "content": None}],
                     [{"role": "user", "content": [{"type": "text", "text": ""}]}],
                     [{"role": "user", "content": ""}, {"role": "user", "content": [{"type": "text", "text": "x"}]}],
                     [{"role": "assistant"}, {"role": "tool", "content": "x"}]):
        body = {"model": M, "max_tokens": 2, "messages": messages}
        status = post(server.base_url, "/v1/chat/completions", body)[0]
        assert (status == 200) == valid(body), (messages, status)


def test_a_messages_content_is_required_and_nullable_exactly_where_documented(server, live_spec):
    valid = schema_accepts(live_spec, "ChatCompletionRequest")
    drift = []
    for role in CHAT_ROLES:
        for content in ("absent", None, "", "x", [], [{"type": "text", "text": "x"}], 5):
            probe = {"role": role} if content == "absent" else {"role": role, "content": content}
            body = {"model": M, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}, probe]}
            status = post(server.base_url, "/v1/chat/completions", body)[0]
            if (status == 200) != valid(body):
                drift.append(f"{probe}: server {status}, document {'accepts' if valid(body) else 'refuses'}")
    assert not drift, drift
