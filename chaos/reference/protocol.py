"""Parse and validate OpenAI-style request bodies; errors in OpenAI's shape.

Every bad input becomes an APIError with a 4xx status: wrong types are a 400 (as
vLLM does), never FastAPI's 422, and nothing a client sends can reach a 500 or the
engine loop. The ranges below are also what /openapi.json publishes (openapi.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..common import error_type_for, openai_error
from ..errors import ServiceError
from .engine.sequence import SEED_MAX, SEED_MIN, SamplingParams
from .serving import json_content_type_error
from .tokenizer import ByteTokenizer

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
TEMPERATURE = (0.0, 2.0)
TOP_P = (0.0, 1.0)  # open at 0
PENALTY = (-2.0, 2.0)  # presence_penalty, frequency_penalty: accepted, ignored
LOGIT_BIAS = (-100.0, 100.0)
MAX_STOP = 4
MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS = 5, 20  # the shapes OpenAI accepts; this server returns none
MAX_JSON_DEPTH = 64  # OpenAI bodies nest a few levels; deeper is refused before anything walks it


class APIError(ServiceError):
    def __init__(self, status: int, message: str, type: str | None = None,
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or error_type_for(status)  # the gateway's rule too (gateway/errors.py)
        self.headers = headers or {}

    def body(self) -> dict:
        return openai_error(self.message, self.type, self.code, self.param)


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


# -- the body -----------------------------------------------------------------------------------------------

def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (RFC 8259 has no NaN or Infinity); send a finite number")


def parse_json_body(raw: bytes, content_type: str) -> dict:
    if (why := json_content_type_error(content_type)) is not None:
        raise APIError(400, why, code="invalid_content_type")
    try:
        # UTF-8 only (RFC 8259 for JSON on a network); json.loads(bytes) would also guess UTF-16/32.
        body = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:  # the C decoder stops at the interpreter's recursion limit
        raise APIError(400, f"The request body nests deeper than {MAX_JSON_DEPTH} levels",
                       code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object", code="invalid_json")
    # Counting brackets is C-fast and bounds how deep the body can be; only a body with many of them is walked.
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and _deeper_than(body, MAX_JSON_DEPTH):
        raise APIError(400, f"The request body nests deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")
    return body


def _deeper_than(value, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:  # bounded: each container is visited once
        v, depth = stack.pop()
        if depth > limit:
            return True
        children = v.values() if isinstance(v, dict) else v
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _show(v) -> str:
    """A short, always-printable view of a client's value for an error message."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return json.dumps(v[:40])
    return json.dumps(v)[:40]


# -- fields -------------------------------------------------------------------------------------------------

def _number(body: dict, name: str, default: float, lo: float, hi: float, lo_open: bool = False,
            param: str | None = None) -> float:
    v = body.get(name)
    if v is None:
        return default
    param = param or name
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(param, f"{param} must be a number, got {_show(v)}", "invalid_type")
    if not _finite(v):  # 1e999 parses as infinity
        raise invalid(param, f"{param} must be a finite number, got {_show(v)}", "invalid_value")
    if (v <= lo if lo_open else v < lo) or v > hi:
        lo_s = f"greater than {lo}" if lo_open else f"at least {lo}"
        code = "decimal_above_max_value" if v > hi else "decimal_below_min_value"
        raise invalid(param, f"{param} must be {lo_s} and at most {hi}, got {_show(v)}", code)
    return float(v)


def _finite(v: int | float) -> bool:
    """math.isfinite without its OverflowError for an int past float's range (1 and 400 zeros): an int is
    finite, and the range checks after this compare it exactly."""
    return isinstance(v, int) or math.isfinite(v)


def _whole(v) -> int | None:
    """v as an int when it is one: an int, or a float with no fraction (JSON has one number type, so 5.0 is the
    integer 5 to JSON Schema, and to vLLM's pydantic); None for anything else, bools included."""
    if type(v) is int:
        return v
    if type(v) is float and v.is_integer():  # False for inf and nan
        return int(v)
    return None


def _integer(body: dict, name: str, minimum: int | None = None, maximum: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if (whole := _whole(v)) is None:
        raise invalid(name, f"{name} must be an integer, got {_show(v)}", "invalid_type")
    v = whole
    if minimum is not None and v < minimum:
        raise invalid(name, f"{name} must be at least {minimum}, got {_show(v)}", "integer_below_min_value")
    if maximum is not None and v > maximum:
        raise invalid(name, f"{name} must be at most {maximum}, got {_show(v)}", "integer_above_max_value")
    return v


def _bool(obj: dict, name: str, param: str | None = None) -> bool:
    v = obj.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise invalid(param or name, f"{param or name} must be a boolean", "invalid_type")
    return v


def _text(v: str, param: str) -> bytes:
    """The UTF-8 bytes of a client's string; a lone surrogate ("\\ud800" is valid JSON) has none."""
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise invalid(param, f"{param} contains a lone UTF-16 surrogate at index {e.start}, which is not a "
                             f"character: it cannot be encoded as UTF-8", "invalid_unicode") from None


def _stop(body: dict, max_chars: int) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [(v, "stop")] if isinstance(v, str) else None
    if isinstance(v, list) and len(v) <= MAX_STOP:
        items = [(s, f"stop[{i}]") for i, s in enumerate(v)]
    if items is None or not all(isinstance(s, str) and s for s, _ in items):
        raise invalid("stop", f"stop must be a non-empty string or a list of at most {MAX_STOP} non-empty strings",
                      "invalid_type")
    for s, param in items:
        _text(s, param)
        if len(s) > max_chars:  # it could never appear in an output, and it would be searched for every token
            raise invalid(param, f"{param} is {len(s)} characters; at most {max_chars} (the context length)",
                          "string_above_max_length")
    return tuple(s for s, _ in items)


def _unsupported(body: dict, kind: str, vocab_size: int) -> None:
    """Fields this server validates but does not implement: refused clearly unless they ask for nothing."""
    for name in ("n", "best_of"):
        v = _integer(body, name, 1)
        if v not in (None, 1):
            raise invalid(name, f"only {name}=1 is supported", "unsupported_value")
    if kind == "chat":
        if _bool(body, "logprobs"):
            raise invalid("logprobs", "logprobs are not implemented by this server; omit it or send false",
                          "unsupported_value")
        if _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS):
            raise invalid("top_logprobs", "top_logprobs are not implemented by this server", "unsupported_value")
    else:
        if _integer(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS):
            raise invalid("logprobs", "logprobs are not implemented by this server; omit it or send 0",
                          "unsupported_value")
        if _bool(body, "echo"):
            raise invalid("echo", "echo is not implemented by this server", "unsupported_value")
        suffix = body.get("suffix")
        if suffix is not None and (not isinstance(suffix, str) or suffix):
            raise invalid("suffix", "suffix is not implemented by this server", "unsupported_value")
    bias = body.get("logit_bias")
    if bias is None:
        return
    if not isinstance(bias, dict):
        raise invalid("logit_bias", "logit_bias must be an object of token id -> bias", "invalid_type")
    for key, value in bias.items():
        param = f"logit_bias.{key[:20]}"
        if not (key.isascii() and key.isdigit() and len(key) < 10 and int(key) < vocab_size):
            raise invalid("logit_bias", f"logit_bias keys must be token ids in [0, {vocab_size}), got "
                                        f"{_show(key)}")
        if value is None:
            raise invalid(param, f"{param} must be a number, got null", "invalid_type")
        _number(bias, key, 0.0, *LOGIT_BIAS, param=param)
    if bias:
        raise invalid("logit_bias", "logit_bias is not implemented by this server; omit it or send {}",
                      "unsupported_value")


# -- the prompt ---------------------------------------------------------------------------------------------

def _too_long(param: str, n: int, max_model_len: int) -> APIError:
    return invalid(param, f"This model's maximum context length is {max_model_len} tokens. However, your request "
                          f"has {n} input tokens. Please reduce the length of the input.", "context_length_exceeded")


def _message_text(m, i: int) -> tuple[str, str]:
    if not isinstance(m, dict):
        raise invalid(f"messages[{i}]", f"messages[{i}] must be an object with role and content", "invalid_type")
    role = m.get("role")
    if role not in CHAT_ROLES:
        raise invalid(f"messages[{i}].role", f"messages[{i}].role must be one of {sorted(CHAT_ROLES)}, "
                                             f"got {_show(role)}")
    content = m.get("content")
    if content is None and role == "assistant":
        content = ""
    if isinstance(content, list):  # content parts: only text is understood
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(f"messages[{i}].content[{j}]", "only text content parts are supported")
            _text(part["text"], f"messages[{i}].content[{j}].text")
            parts.append(part["text"])
        content = "".join(parts)
    elif isinstance(content, str):
        _text(content, f"messages[{i}].content")
    else:
        raise invalid(f"messages[{i}].content", f"messages[{i}].content must be a string", "invalid_type")
    return role, content


def _prompt_ids(body: dict, kind: str, tok: ByteTokenizer, max_model_len: int) -> tuple[list[int], str]:
    """Token ids of the prompt. A prompt over the context is refused from its length, before a list of its
    ids is built (a 20 MB prompt would be 20 million ints)."""
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise invalid("messages", "messages must be a non-empty list of {role, content} objects",
                          "invalid_type" if messages is not None else "missing_required_parameter")
        if not messages:
            raise invalid("messages", "messages must not be empty", "empty_array")
        parsed = [{"role": r, "content": c} for r, c in (_message_text(m, i) for i, m in enumerate(messages))]
        if not any(m["content"] for m in parsed):
            raise invalid("messages", "every message is empty: there is nothing to respond to", "empty_input")
        n = tok.count_chat(parsed)
        if n >= max_model_len:
            raise _too_long("messages", n, max_model_len)
        return tok.apply_chat_template(parsed), "messages"
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise invalid("prompt", "prompt must not be empty", "empty_input")
        n = len(_text(prompt, "prompt")) + 1  # bytes and BOS
        if n >= max_model_len:
            raise _too_long("prompt", n, max_model_len)
        return tok.encode(prompt), "prompt"
    # Ids over the context are refused from their count, before they are walked.
    if isinstance(prompt, list) and len(prompt) >= max_model_len and _whole(prompt[0]) is not None:
        raise _too_long("prompt", len(prompt), max_model_len)
    if isinstance(prompt, list) and prompt and not all(type(t) is int for t in prompt):
        whole = [_whole(t) for t in prompt]  # token ids written as 5.0 are ids too
        prompt = whole if None not in whole else prompt
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
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
        raise APIError(404, f"The model {_show(model)} does not exist. This server serves `{model_name}`.",
                       param="model", code="model_not_found")
    stream = _bool(body, "stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise invalid("stream_options", "stream_options must be an object", "invalid_type")
    include_usage = _bool(opts or {}, "include_usage", "stream_options.include_usage")
    _unsupported(body, kind, tok.vocab_size)
    temperature = _number(body, "temperature", 1.0, *TEMPERATURE)
    top_p = _number(body, "top_p", 1.0, *TOP_P, lo_open=True)
    top_k = max(0, _integer(body, "top_k", -1) or 0)  # vLLM's -1 (and 0) mean every token
    for name in ("presence_penalty", "frequency_penalty"):
        _number(body, name, 0.0, *PENALTY)  # accepted and ignored, as a small server may
    seed = _integer(body, "seed", SEED_MIN, SEED_MAX)
    max_param = "max_tokens"
    # At most the context less the one token every prompt has: the bound /openapi.json publishes, and what
    # keeps a 4,300-digit max_tokens out of the context message's arithmetic.
    max_tokens = _integer(body, "max_tokens", 1, max_model_len - 1)
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        max_param = "max_completion_tokens"
        max_tokens = _integer(body, max_param, 1, max_model_len - 1)
    stop = _stop(body, max_model_len)
    if body.get("user") is not None and not isinstance(body["user"], str):  # ignored, but typed as OpenAI's
        raise invalid("user", f"user must be a string, got {_show(body['user'])}", "invalid_type")
    ignore_eos = _bool(body, "ignore_eos")
    prompt_ids, prompt_param = _prompt_ids(body, kind, tok, max_model_len)

    n_prompt = len(prompt_ids)
    if max_tokens is None:
        max_tokens = min(16 if kind == "completion" else default_max_tokens, max_model_len - n_prompt)
    elif n_prompt + max_tokens > max_model_len:
        raise invalid(max_param, f"This model's maximum context length is {max_model_len} tokens. However, you "
                      f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the {prompt_param}, {max_tokens} "
                      f"in the completion). Please reduce the length of the {prompt_param} or completion.",
                      "context_length_exceeded")
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens, seed=seed,
                            stop=stop, ignore_eos=ignore_eos)
    return GenerationRequest(kind, model, prompt_ids, params, stream, include_usage)


# -- parsing in the body worker (serving.BodyWorker) ------------------------------------------------------------

def parse_for_worker(raw: bytes, meta: dict) -> dict:
    """parse_generation in the body worker's process; a JSON-able reply (the prompt ids fit the context)."""
    try:
        req = parse_generation(parse_json_body(raw, meta["content_type"]), meta["kind"], meta["model_name"],
                               meta["max_model_len"], meta["default_max_tokens"], ByteTokenizer())
    except APIError as e:
        return {"error": [e.status, e.message, e.type, e.param, e.code]}
    p = req.params
    return {"request": {"kind": req.kind, "model": req.model, "prompt_ids": req.prompt_ids, "stream": req.stream,
                        "include_usage": req.include_usage,
                        "params": {"temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
                                   "max_tokens": p.max_tokens, "seed": p.seed, "stop": list(p.stop),
                                   "ignore_eos": p.ignore_eos}}}


def from_worker(reply: dict) -> GenerationRequest:
    """The request parse_for_worker described, or its APIError raised."""
    if "error" in reply:
        status, message, type_, param, code = reply["error"]
        raise APIError(status, message, type_, param, code)
    r = reply["request"]
    params = SamplingParams(**{**r["params"], "stop": tuple(r["params"]["stop"])})
    return GenerationRequest(r["kind"], r["model"], r["prompt_ids"], params, r["stream"], r["include_usage"])
