"""The OpenAPI 3.1 document of the LLM proxy's control API (GET /__chaos/openapi.json), so fuzzers and clients
can be generated from it. tests/proxy/llm/test_admin.py holds it to what admin.py answers."""

from __future__ import annotations

from functools import lru_cache

from chaos.common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER

from .effects import EFFECTS
from .rules import _NAME, METHODS


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


@lru_cache(maxsize=1)
def admin_spec() -> dict:
    error = {"$ref": "#/components/schemas/Error"}
    rule_out = {"$ref": "#/components/schemas/StoredRule"}
    secured = {"security": [{"faultToken": []}]}
    unauthorized = {"401": _json(error, f"missing or wrong {FAULT_TOKEN_HEADER} (when the proxy has a token)")}
    name = {"name": "name", "in": "path", "required": True,
            "schema": {"type": "string", "pattern": _NAME.pattern}}
    paths = {
        "/__chaos/health": {"get": {"summary": "Is the proxy up (open without a token)", "responses": {
            "200": _json({"type": "object", "properties": {"status": {"const": "ok"}}}, "up")}}},
        "/__chaos/openapi.json": {"get": {"summary": "This document (open without a token)", "responses": {
            "200": _json({"type": "object"}, "the document")}}},
        "/__chaos/faults": {
            "get": {"summary": "The rules, in the order they are considered", **secured, "responses": {
                "200": _json({"type": "array", "items": rule_out}, "every rule"), **unauthorized}},
            "post": {"summary": "Add a rule", **secured,
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/Rule"}}}},
                     "responses": {"201": _json(rule_out, "stored"), "400": _json(error, "not a valid rule"),
                                   "409": _json(error, "a rule of that name exists"), **unauthorized}},
            "delete": {"summary": "Remove every rule", **secured,
                       "responses": {"204": {"description": "none left"}, **unauthorized}}},
        "/__chaos/faults/{name}": {
            "get": {"summary": "One rule, with its counts", **secured, "parameters": [name],
                    "responses": {"200": _json(rule_out, "the rule"), "404": _json(error, "no rule of that name"),
                                  **unauthorized}},
            "delete": {"summary": "Remove one rule (requests it holds are let go)", **secured, "parameters": [name],
                       "responses": {"204": {"description": "removed"}, "404": _json(error, "no rule of that name"),
                                     **unauthorized}}},
    }
    # Any case of a method's letters: the proxy upper-cases it.
    method = "^(" + "|".join("".join(f"[{c}{c.lower()}]" for c in m) for m in sorted(METHODS)) + ")$"
    rule = {
        "type": "object", "required": ["name", "effect"], "additionalProperties": False,
        "properties": {
            "name": name["schema"],
            "effect": {"enum": sorted(EFFECTS)},
            "params": {"type": ["object", "null"], "description": "the effect's own settings (docs/llm-proxy.md); "
                                                                  "null, like an absent or null param, means the "
                                                                  "defaults"},
            "match": {"type": ["object", "null"], "additionalProperties": False, "properties": {
                "method": {"type": ["string", "null"], "pattern": method, "description": "any case"},
                "path": {"type": ["string", "null"], "pattern": "^/", "description": "exact, or a prefix when it "
                                                                                    "ends in *, such as /v1/*"},
                "model": {"type": ["string", "null"]}, "stream": {"type": ["boolean", "null"]}}},
            "probability": {"type": "number", "minimum": 0, "maximum": 1, "default": 1},
            "seed": {"type": "integer", "default": 0},
            "occurrences": {"type": ["array", "null"], "minItems": 1, "items": {"type": "integer", "minimum": 1},
                            "description": "1-based numbers of the matching requests to act on, e.g. [2, 4]"},
            "count": {"type": ["integer", "null"], "minimum": 1, "description": "act on at most this many"},
            "window": {"type": ["object", "null"], "additionalProperties": False,
                       "properties": {"start": {"type": "number", "minimum": 0},
                                      "end": {"type": ["number", "null"], "minimum": 0}},
                       "description": "seconds after the rule was added; end after start"}},
        # Each effect's params: exactly one of these holds, the one whose effect the rule names.
        "oneOf": [{"properties": {"effect": {"const": e}, "params": EFFECTS[e].params_schema()}}
                  for e in sorted(EFFECTS)]}
    stored = {**rule, "required": ["name", "effect", "matched", "applied"],
              "properties": {**rule["properties"], "matched": {"type": "integer", "minimum": 0},
                             "applied": {"type": "integer", "minimum": 0}}}
    return {"openapi": "3.1.0",
            "info": {"title": "llm-chaos LLM fault proxy: control API", "version": "1",
                     "description": "Fault rules of the SSE-aware proxy, on the proxy's own port under /__chaos/. "
                                    "Every other path is relayed to the upstream."},
            "paths": paths,
            "components": {"schemas": {"Rule": rule, "StoredRule": stored, "Error": {
                "type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}},
                "securitySchemes": {"faultToken": {
                    "type": "apiKey", "in": "header", "name": FAULT_TOKEN_HEADER,
                    "description": f"the value of {FAULT_TOKEN_ENV} the proxy was started with, if any"}}}}
