"""What the gateway learns from the SSE bytes it passes through, without holding them back."""

from __future__ import annotations

import json


class SSECollector:
    """Watches SSE bytes fed in arbitrary pieces: notices [DONE] and error events as they pass, and keeps the
    raw bytes (bounded) so content, finish_reason and usage are parsed once, at the end, only if wanted."""

    LIMIT = 1 << 20

    def __init__(self, keep: bool = True):
        self._raw = bytearray()
        self._tail = b""
        self.keep = keep
        self.done = False
        self.error = False

    def feed(self, data: bytes) -> None:
        window = self._tail + data
        if b"[DONE]" in window:
            self.done = True
        if b'"error"' in window and b'data: {"error"' in window:
            self.error = True
        self._tail = window[-24:]
        if self.keep and len(self._raw) + len(data) <= self.LIMIT:
            self._raw += data
        else:
            self.keep = False

    DEFER_MAX = 16 * 1024  # a stream up to this is kept raw and parsed only if the cache serves it (16 MB at most
    # for the default 1,024 entries); a longer one is parsed now, so the cache holds its text, not its events

    def deferred_answer(self):
        """answer itself, to call later, for a short stream; else answer() now."""
        return self.answer if self.keep and len(self._raw) <= self.DEFER_MAX else self.answer()

    def answer(self) -> tuple[str, str, dict, str] | None:
        """(text, finish_reason, usage, model) of the whole stream, or None when it was not kept."""
        if not self.keep:
            return None
        text, finish, usage, model = [], "stop", {}, ""
        for line in bytes(self._raw).split(b"\n"):
            line = line.strip()
            if not line.startswith(b"data:") or line.endswith(b"[DONE]"):
                continue
            try:
                obj = json.loads(line[5:])
            except ValueError:
                continue
            model = obj.get("model", model)
            usage = obj.get("usage") or usage
            for c in obj.get("choices") or []:
                piece = (c.get("delta") or {}).get("content") if "delta" in c else c.get("text")
                if piece:
                    text.append(piece)
                if c.get("finish_reason"):
                    finish = c["finish_reason"]
        return "".join(text), finish, usage, model


def answer_from_json(body: bytes) -> tuple[str, str, dict, str] | None:
    try:
        obj = json.loads(body)
        c = obj["choices"][0]
        text = c["message"]["content"] if "message" in c else c["text"]
        return text or "", c.get("finish_reason") or "stop", obj.get("usage") or {}, obj.get("model", "")
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def synthesize(kind: str, rid: str, model: str, text: str, finish: str, usage: dict, stream: bool,
               include_usage: bool, fingerprint: str) -> bytes | dict:
    """A response built from a cached answer, in the shape the request asked for."""
    import time

    base = {"id": ("chatcmpl-" if kind == "chat" else "cmpl-") + rid, "created": int(time.time()), "model": model,
            "system_fingerprint": fingerprint}
    if not stream:
        if kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": finish}
            return {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        return {**base, "object": "text_completion", "usage": usage,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

    def chunk(choice):
        return b"data: " + json.dumps({**base, "object": obj, "choices": [choice]}).encode() + b"\n\n"

    out = b""
    if kind == "chat":
        out += chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
        out += chunk({"index": 0, "delta": {"content": text}, "finish_reason": None})
        out += chunk({"index": 0, "delta": {}, "finish_reason": finish})
    else:
        out += chunk({"index": 0, "text": text, "finish_reason": None})
        out += chunk({"index": 0, "text": "", "finish_reason": finish})
    if include_usage:
        out += b"data: " + json.dumps({**base, "object": obj, "choices": [], "usage": usage}).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"
