"""OpenAPI 3.1 documents for the reference server and the gateway (served at GET /openapi.json).

One builder for both, from the same ranges the server validates with (protocol.py, faults.py), so a client
generator or a test generator (schemathesis) sees what the server accepts. Torch-free: the gateway imports it.
tests/reference/test_openapi.py checks that every route an app registers is documented here.
"""

from __future__ import annotations

from ..common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER
from .engine.sequence import SEED_MAX, SEED_MIN
from .faults import HOOKS, WEDGE_CLASSES
from .protocol import CHAT_ROLES, MAX_JSON_DEPTH, MAX_STOP, PENALTY, TEMPERATURE, TOP_P
from .tokenizer import VOCAB_SIZE

ERROR_CODES = {
    400: "Invalid request: error.param names the field, error.code says why (invalid_type, invalid_value, "
         "invalid_unicode, context_length_exceeded, unsupported_value, invalid_json, invalid_content_type, ...).",
    401: f"The fault routes need the header {FAULT_TOKEN_HEADER}.",
    404: "Unknown model (code model_not_found) or route (code not_found).",
    405: "Method not allowed on this route.",
    408: "The request's headers or body did not arrive in time (--header-timeout, --body-timeout); the connection "
         "is closed after it.",
    413: "The body is over the size limit (code request_too_large); it is refused before it is read.",
    429: "Too many requests waiting (code rate_limit_exceeded); wait Retry-After.",
    500: "A failure of this request alone (code internal_error, injected_fault); the server serves on.",
    503: "Draining (server_draining), overloaded (overloaded), engine stopped (engine_dead), too many large bodies "
         "waiting to be parsed (server_busy), or the KV cache cannot hold the request now (generation_failed); "
         "the first three are answered before the body is read.",
}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_responses(*statuses: int) -> dict:
    retry = {"retry-after": {"description": "Seconds to wait, rounded up", "schema": {"type": "string"}},
             "retry-after-ms": {"description": "Milliseconds to wait, exact", "schema": {"type": "string"}}}
    out = {}
    for st in statuses:
        r = {"description": ERROR_CODES[st], "content": {"application/json": {"schema": _ref("Error")}}}
        if st in (429, 503):
            r["headers"] = retry
        out[str(st)] = r
    return out


def _nullable(schema: dict) -> dict:
    """The schema, with null allowed: the server reads null as absent in every optional field."""
    if "oneOf" in schema:
        return {**schema, "oneOf": [*schema["oneOf"], {"type": "null"}]}
    out = dict(schema)
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    out["type"] = [*types, "null"] if "null" not in types else types
    if "const" in out:
        out["enum"] = [out.pop("const"), None]
    return out


def _sampling(max_model_len: int | None) -> dict:
    max_tokens = {"type": "integer", "minimum": 1, "description": "Tokens to generate; prompt + max_tokens must fit "
                                                                   "the context (else context_length_exceeded)"}
    if max_model_len:
        max_tokens["maximum"] = max_model_len - 1
    stop_item = {"type": "string", "minLength": 1}
    if max_model_len:
        stop_item["maxLength"] = max_model_len
    number = {"type": "number"}
    optional = {
        "max_tokens": max_tokens,
        "temperature": {**number, "minimum": TEMPERATURE[0], "maximum": TEMPERATURE[1], "default": 1.0,
                        "description": "0 is greedy"},
        "top_p": {**number, "exclusiveMinimum": TOP_P[0], "maximum": TOP_P[1], "default": 1.0},
        "top_k": {"type": "integer", "minimum": -1, "default": 0, "description": "-1 or 0: every token"},
        "seed": {"type": "integer", "minimum": SEED_MIN, "maximum": SEED_MAX,
                 "description": "Seeds this request's own generator: its samples do not depend on the batch"},
        "stop": {"oneOf": [stop_item, {"type": "array", "items": stop_item, "maxItems": MAX_STOP}]},
        "stream": {"type": "boolean", "default": False},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": ["boolean", "null"]}}},
        "ignore_eos": {"type": "boolean", "default": False, "description": "vLLM's: generate exactly max_tokens"},
        "presence_penalty": {**number, "minimum": PENALTY[0], "maximum": PENALTY[1],
                             "description": "accepted, ignored"},
        "frequency_penalty": {**number, "minimum": PENALTY[0], "maximum": PENALTY[1],
                              "description": "accepted, ignored"},
        "n": {"type": "integer", "minimum": 1, "maximum": 1},
        "logit_bias": {"type": "object", "maxProperties": 0, "description": "not implemented: only {}"},
        "user": {"type": "string", "description": "accepted, ignored"},
    }
    model = {"type": "string", "minLength": 1, "description": "The served model's id (GET /v1/models)"}
    return {"model": model, **{name: _nullable(schema) for name, schema in optional.items()}}


def _requests(max_model_len: int | None) -> dict:
    token_ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": VOCAB_SIZE - 1},
                 "minItems": 1}
    text = {"type": "string", "minLength": 1}
    completion = {**_sampling(max_model_len),
                  "prompt": {"oneOf": [text, token_ids, {"type": "array", "items": text, "minItems": 1, "maxItems": 1},
                                       {"type": "array", "items": token_ids, "minItems": 1, "maxItems": 1}],
                             "description": "Text (one token per UTF-8 byte, plus BOS) or token ids; no lone "
                                            "surrogates"},
                  "best_of": _nullable({"type": "integer", "minimum": 1, "maximum": 1}),
                  "logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": 0,
                                         "description": "not implemented: only 0"}),
                  "echo": _nullable({"type": "boolean", "const": False}),
                  "suffix": _nullable({"type": "string", "maxLength": 0})}
    part = {"type": "object", "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
    content = [{"type": "string"}, {"type": "array", "items": part}]
    message = {"oneOf": [
        {"type": "object", "required": ["role", "content"],
         "properties": {"role": {"enum": [r for r in CHAT_ROLES if r != "assistant"]}, "content": {"oneOf": content}}},
        {"type": "object", "required": ["role"], "description": "an assistant's content may be null or absent",
         "properties": {"role": {"const": "assistant"}, "content": {"oneOf": [*content, {"type": "null"}]}}}]}
    # At least one message says something: a non-empty string, or a part with non-empty text.
    said = {"type": "object", "required": ["content"], "properties": {"content": {"anyOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "contains": {"type": "object", "required": ["text"],
                                       "properties": {"text": {"type": "string", "minLength": 1}}}}]}}}
    chat = {**_sampling(max_model_len),
            "messages": {"type": "array", "items": message, "minItems": 1, "contains": said,
                         "description": "At least one message with content; rendered with ChatML"},
            "max_completion_tokens": _sampling(max_model_len)["max_tokens"],
            "logprobs": _nullable({"type": "boolean", "const": False, "description": "not implemented"}),
            "top_logprobs": _nullable({"type": "integer", "minimum": 0, "maximum": 0})}
    extra = (f"Unknown fields are ignored. Bodies are UTF-8 JSON (no NaN/Infinity), at most {MAX_JSON_DEPTH} levels "
             f"deep.")
    return {
        "CompletionRequest": {"type": "object", "required": ["model", "prompt"], "properties": completion,
                              "description": extra},
        "ChatCompletionRequest": {"type": "object", "required": ["model", "messages"], "properties": chat,
                                  "description": extra},
    }


def _schemas(max_model_len: int | None) -> dict:
    usage = {"type": "object", "properties": {
        "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
        "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer"}}}}}
    finish = {"enum": ["stop", "length", "abort", "error", None]}
    common = {"id": {"type": "string"}, "created": {"type": "integer"}, "model": {"type": "string"},
              "system_fingerprint": {"type": "string", "description": "the replica id"}}
    timing = {"type": "object", "required": ["arrival", "first_token", "end"], "description":
              "The server's own clock for this request (unix seconds; one wall-clock anchor at arrival plus "
              "monotonic intervals): arrival = the handler began, before the body was read; first_token = just "
              "before the first chunk carrying generated text was written (null if none); end = the final chunk "
              "(or this body) was built. In the chunk carrying finish_reason, and in a non-streamed body.",
              "properties": {"arrival": {"type": "number"}, "first_token": {"type": ["number", "null"]},
                             "end": {"type": "number"}}}
    head = ["id", "object", "created", "model", "choices"]
    index = {"type": "integer"}
    return {
        **_requests(max_model_len),
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["message", "type", "param", "code"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                           "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}},
        "Usage": usage,
        "ChaosTiming": timing,
        "Completion": {"type": "object", "required": [*head, "usage"], "properties": {
            **common, "object": {"const": "text_completion"}, "usage": _ref("Usage"),
            "chaos_timing": _ref("ChaosTiming"),
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "index": {"type": "integer"}, "text": {"type": "string"}, "logprobs": {"type": "null"},
                "finish_reason": finish}}}}},
        "ChatCompletion": {"type": "object", "required": [*head, "usage"], "properties": {
            **common, "object": {"const": "chat.completion"}, "usage": _ref("Usage"),
            "chaos_timing": _ref("ChaosTiming"),
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "index": {"type": "integer"}, "logprobs": {"type": "null"}, "finish_reason": finish,
                "message": {"type": "object", "properties": {"role": {"const": "assistant"},
                                                             "content": {"type": "string"}}}}}}}},
        "CompletionChunk": {"type": "object", "required": head, "description": "One event of a streamed "
                            "completion; with empty choices, the usage event", "properties": {
            **common, "object": {"const": "text_completion"}, "usage": _ref("Usage"),
            "chaos_timing": _ref("ChaosTiming"),
            "choices": {"type": "array", "items": {"type": "object", "required": ["index", "text"], "properties": {
                "index": index, "text": {"type": "string"}, "logprobs": {"type": "null"},
                "finish_reason": finish}}}}},
        "ChatCompletionChunk": {"type": "object", "required": head, "description": "One event of a streamed chat "
                                "completion; with empty choices, the usage event", "properties": {
            **common, "object": {"const": "chat.completion.chunk"}, "usage": _ref("Usage"),
            "chaos_timing": _ref("ChaosTiming"),
            "choices": {"type": "array", "items": {"type": "object", "required": ["index", "delta"], "properties": {
                "index": index, "logprobs": {"type": "null"}, "finish_reason": finish,
                "delta": {"type": "object", "properties": {"role": {"const": "assistant"},
                                                           "content": {"type": "string"}}}}}}}},
        "ModelList": {"type": "object", "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {
            "type": "object", "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                                             "created": {"type": "integer"}, "owned_by": {"type": "string"},
                                             "max_model_len": {"type": "integer"}}}}}},
    }


def _event(chunk: str) -> dict:
    """One server-sent event of a stream (OpenAPI 3.1 has a text/event-stream's schema describe each event, as
    {data, event, id, retry}; 3.2 names it itemSchema): a chunk, an error, or the closing [DONE]."""
    return {"type": "object", "required": ["data"], "properties": {"data": {"anyOf": [
        {"const": "[DONE]"},
        {"type": "string", "contentMediaType": "application/json",
         "contentSchema": {"anyOf": [_ref(chunk), _ref("Error")]}}]}}}


def _generation(summary: str, request: str, response: str, statuses: tuple[int, ...]) -> dict:
    stream = ("With stream: true, server-sent events: `data: <chunk JSON>` lines, the chunk carrying finish_reason "
              "also carries chaos_timing, then a usage chunk (empty choices) with stream_options.include_usage, then "
              "`data: [DONE]`. An error after the stream began is `data: {\"error\": ...}` then `data: [DONE]`.")
    return {"post": {
        "summary": summary, "description": stream,
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
        "responses": {"200": {"description": "The completion, or its event stream",
                              "headers": {"x-served-by": {"schema": {"type": "string"}},
                                          "x-request-id": {"schema": {"type": "string"}}},
                              "content": {"application/json": {"schema": _ref(response)},
                                          "text/event-stream": {"schema": _event(response + "Chunk")}}},
                      **_error_responses(*statuses)}}}


def _paths(statuses: tuple[int, ...], gateway: bool) -> dict:
    health = ("200 when the gateway serves, 503 while draining" if gateway
              else "200 with an empty body when serving; 503 while draining or once the engine stopped")
    return {
        "/v1/completions": _generation("Text completion (legacy)", "CompletionRequest", "Completion", statuses),
        "/v1/chat/completions": _generation("Chat completion", "ChatCompletionRequest", "ChatCompletion", statuses),
        "/v1/models": {"get": {"summary": "The served model", "responses": {
            "200": {"description": "One model", "content": {"application/json": {"schema": _ref("ModelList")}}},
            **(_error_responses(503) if gateway else {})}}},
        "/health": {"get": {"summary": "Liveness for load balancers", "responses": {
            "200": {"description": health}, "503": {"description": "not serving"}}}},
        "/metrics": {"get": {"summary": "Prometheus metrics (vLLM's names" + (", gateway:*" if gateway else "") + ")",
                             "responses": {"200": {"description": "text exposition format",
                                                   "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {
            "200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    }


def _fault_paths() -> dict:
    hooks = {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": {
        "step_delay_ms": {"type": "number", "minimum": 0, "maximum": 60000},
        "step_slowdown": {"type": "number", "minimum": 1, "maximum": 10},
        "hang_s": {"type": "number", "minimum": 0, "maximum": 3600},
        "kv_block_cap": {"type": "integer", "minimum": 1, "maximum": 1 << 30},
        "fail_fraction": {"type": "number", "minimum": 0, "maximum": 1},
        "engine_error": {"description": "any value"},
        "crash": {"oneOf": [{"const": True}, {"type": "object", "additionalProperties": False, "properties": {
            "exit_code": {"type": "integer", "minimum": 0, "maximum": 255}}}]},
        "wedge_on": {"enum": sorted(WEDGE_CLASSES)}}}
    for name, doc in HOOKS.items():
        hooks["properties"][name]["description"] = doc
    state = {"description": "Active hooks and the available ones", "content": {"application/json": {"schema": {
        "type": "object", "properties": {"active": {"type": "object"}, "available": {"type": "object"}}}}}}
    secured = {"security": [{"faultToken": []}]}
    errs = _error_responses(400, 401, 413)  # 413: a fault body over 64 KB
    return {
        "/admin/faults": {
            "get": {"summary": "List fault hooks", **secured, "responses": {"200": state, **_error_responses(401)}},
            "post": {"summary": "Apply one or more fault hooks", **secured,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": hooks}}},
                     "responses": {"200": state, **errs}},
            "delete": {"summary": "Revert every hook", **secured, "responses": {"200": state, **_error_responses(401)}},
        },
        "/admin/faults/{name}": {"delete": {
            "summary": "Revert one hook", **secured,
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"enum": list(HOOKS)}}],
            "responses": {"200": state, **_error_responses(401), "404": {
                "description": "unknown hook", "content": {"application/json": {"schema": _ref("Error")}}}}}},
    }


def _document(title: str, description: str, paths: dict, max_model_len: int | None, fault_hooks: bool) -> dict:
    components: dict = {"schemas": _schemas(max_model_len)}
    if fault_hooks:
        components["securitySchemes"] = {"faultToken": {
            "type": "apiKey", "in": "header", "name": FAULT_TOKEN_HEADER,
            "description": f"The value of {FAULT_TOKEN_ENV} the server was started with"}}
    return {"openapi": "3.1.0", "info": {"title": title, "version": "1", "description": description},
            "paths": paths, "components": components}


def server_spec(*, model_name: str = "chaos-reference", max_model_len: int | None = None, max_body_mb: int = 32,
                fault_hooks: bool = False) -> dict:
    """The reference server's document; /admin/faults only when fault hooks are on."""
    paths = _paths((400, 404, 408, 413, 429, 500, 503), gateway=False)
    if fault_hooks:
        paths.update(_fault_paths())
    desc = (f"chaos reference server serving `{model_name}`"
            + (f", context {max_model_len} tokens" if max_model_len else "")
            + f"; request bodies up to {max_body_mb} MB. Every error is {{\"error\": {{message, type, param, code}}}}.")
    return _declare_models(_document("llm-chaos reference server", desc, paths, max_model_len, fault_hooks),
                           [model_name])


def _declare_models(doc: dict, names: list[str] | None) -> dict:
    """The served names, declared: a fuzzer that draws names from the schema gets past the model check to the
    engine (any other name is the declared 404 model_not_found)."""
    for kind in ("CompletionRequest", "ChatCompletionRequest") if names else ():
        props = doc["components"]["schemas"][kind]["properties"]
        props["model"] = {**props["model"], "enum": list(names)}
    return doc


def gateway_spec(*, max_body_mb: int = 32, max_model_len: int | None = None, extra_paths: dict | None = None,
                 model_names: list[str] | None = None) -> dict:
    """The gateway's document: the replicas' generation API (validated by them, passed through) plus its own
    routes. extra_paths adds or replaces path items the gateway registers beyond these; model_names and
    max_model_len, when the gateway learned them from its upstreams, are declared as the server declares its
    own."""
    paths = _paths((400, 404, 408, 413, 429, 500, 503), gateway=True)
    paths["/gateway/state"] = {"get": {"summary": "Upstream state, breaker, cache and queue as JSON", "responses": {
        "200": {"description": "state", "content": {"application/json": {"schema": {"type": "object"}}}}}}}
    paths.update(extra_paths or {})
    desc = (f"chaos reference gateway: retries, timeouts, ejection and fallback in front of reference replicas; "
            f"request bodies up to {max_body_mb} MB. x-served-by names the path (replica id, backup or cache). "
            f"Every error is {{\"error\": {{message, type, param, code}}}}.")
    return _declare_models(_document("llm-chaos reference gateway", desc, paths, max_model_len, False), model_names)
