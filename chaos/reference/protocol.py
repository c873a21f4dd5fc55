"""Parse and validate OpenAI-style request bodies; errors in OpenAI's shape.

Every bad input becomes an APIError with a 4xx status: wrong types are a 400 (as
vLLM does), never FastAPI's 422, and nothing a client sends can reach a 500.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from .engine.sequence import SamplingParams
from .tokenizer import ByteTokenizer

CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(param: str | None, message: str, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


@dataclass(slots=True)
class GenerationRequest:
    kind: str  # "chat" | "completion"
    model: str
    prompt_ids: list[int]
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    echo_fields: dict = field(default_factory=dict)


def parse_json_body(raw: bytes, content_type: str) -> dict:
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise APIError(400, f"Content-Type must be application/json, not {content_type or 'missing'!r}",
                       code="invalid_content_type")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object", code="invalid_json")
    return body


def _number(body: dict, name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(name, f"{name} must be a number, got {json.dumps(v)[:40]}", "invalid_type")
    if (v <= lo if lo_open else v < lo) or v > hi:
        lo_s = f"greater than {lo}" if lo_open else f"at least {lo}"
        code = "decimal_above_max_value" if v > hi else "decimal_below_min_value"
        raise invalid(name, f"{name} must be {lo_s} and at most {hi}, got {v}", code)
    return float(v)


def _integer(body: dict, name: str, minimum: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(name, f"{name} must be an integer, got {json.dumps(v)[:40]}", "invalid_type")
    if minimum is not None and v < minimum:
        raise invalid(name, f"{name} must be at least {minimum}, got {v}", "integer_below_min_value")
    return v


def _bool(obj: dict, name: str, param: str | None = None) -> bool:
    v = obj.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise invalid(param or name, f"{param or name} must be a boolean", "invalid_type")
    return v


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v) or len(v) > 4:
        raise invalid("stop", "stop must be a non-empty string or a list of at most 4 non-empty strings",
                      "invalid_type")
    return tuple(v)


def _message_text(m, i: int) -> tuple[str, str]:
    if not isinstance(m, dict):
        raise invalid(f"messages[{i}]", f"messages[{i}] must be an object with role and content", "invalid_type")
    role = m.get("role")
    if role not in CHAT_ROLES:
        raise invalid(f"messages[{i}].role", f"messages[{i}].role must be one of {sorted(CHAT_ROLES)}, "
                                             f"got {json.dumps(role)[:40]}")
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):  # content parts: only text is understood
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(f"messages[{i}].content[{j}]", "only text content parts are supported")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise invalid(f"messages[{i}].content", f"messages[{i}].content must be a string", "invalid_type")
    return role, content


def _prompt_ids(body: dict, kind: str, tok: ByteTokenizer) -> tuple[list[int], str]:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise invalid("messages", "messages must be a non-empty list of {role, content} objects",
                          "invalid_type" if messages is not None else "missing_required_parameter")
        if not messages:
            raise invalid("messages", "messages must not be empty", "empty_array")
        parsed = [_message_text(m, i) for i, m in enumerate(messages)]
        if not any(content for _, content in parsed):
            raise invalid("messages", "every message is empty: there is nothing to respond to", "empty_input")
        return tok.apply_chat_template([{"role": r, "content": c} for r, c in parsed]), "messages"
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise invalid("prompt", "prompt must not be empty", "empty_input")
        return tok.encode(prompt), "prompt"
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < tok.vocab_size for t in prompt):
            raise invalid("prompt", f"token ids must be in [0, {tok.vocab_size})")
        return list(prompt), "prompt"
    if isinstance(prompt, list) and len(prompt) > 1:
        raise invalid("prompt", "only one prompt per request is supported", "unsupported_value")
    if prompt is None:
        raise invalid("prompt", "prompt is required", "missing_required_parameter")
    raise invalid("prompt", "prompt must be a non-empty string or a list of token ids",
                  "empty_input" if prompt == [] else "invalid_type")


def parse_generation(body: dict, kind: str, model_name: str, max_model_len: int, default_max_tokens: int,
                     tok: ByteTokenizer) -> GenerationRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model", "model is required and must be a string",
                      "missing_required_parameter" if model is None else "invalid_type")
    if model != model_name:
        raise APIError(404, f"The model `{model}` does not exist. This server serves `{model_name}`.",
                       param="model", code="model_not_found")
    stream = _bool(body, "stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise invalid("stream_options", "stream_options must be an object", "invalid_type")
    include_usage = _bool(opts or {}, "include_usage", "stream_options.include_usage")
    n = _integer(body, "n", 1)
    if n not in (None, 1):
        raise invalid("n", "only n=1 is supported", "unsupported_value")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    for name in ("presence_penalty", "frequency_penalty"):
        _number(body, name, 0.0, -2.0, 2.0)  # accepted and ignored, as a small server may
    seed = _integer(body, "seed")
    max_param = "max_tokens"
    max_tokens = _integer(body, "max_tokens", 1)
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        max_param, max_tokens = "max_completion_tokens", _integer(body, "max_completion_tokens", 1)
    stop = _stop(body)
    prompt_ids, prompt_param = _prompt_ids(body, kind, tok)

    n_prompt = len(prompt_ids)
    if n_prompt >= max_model_len:
        raise invalid(prompt_param, f"This model's maximum context length is {max_model_len} tokens. However, "
                      f"your request has {n_prompt} input tokens. Please reduce the length of the input.",
                      "context_length_exceeded")
    if max_tokens is None:
        max_tokens = min(16 if kind == "completion" else default_max_tokens, max_model_len - n_prompt)
    elif n_prompt + max_tokens > max_model_len:
        raise invalid(max_param, f"This model's maximum context length is {max_model_len} tokens. However, you "
                      f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the {prompt_param}, {max_tokens} "
                      f"in the completion). Please reduce the length of the {prompt_param} or completion.",
                      "context_length_exceeded")
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, stop=stop,
                            ignore_eos=_bool(body, "ignore_eos"))
    return GenerationRequest(kind, model, prompt_ids, params, stream, include_usage)
