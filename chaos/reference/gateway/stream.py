"""What the gateway learns from the SSE bytes it passes through, without holding them back."""

from __future__ import annotations

import json


class SSECollector:
    """Accumulates content, finish_reason and usage from SSE bytes fed in arbitrary pieces."""

    def __init__(self):
        self._buf = b""
        self.done = False
        self.error = False
        self.text: list[str] = []
        self.finish_reason = "stop"
        self.usage: dict = {}
        self.model = ""

    def feed(self, data: bytes) -> None:
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if "error" in obj:
                self.error = True
                continue
            self.model = obj.get("model", self.model)
            if obj.get("usage"):
                self.usage = obj["usage"]
            for c in obj.get("choices") or []:
                piece = (c.get("delta") or {}).get("content") if "delta" in c else c.get("text")
                if piece:
                    self.text.append(piece)
                if c.get("finish_reason"):
                    self.finish_reason = c["finish_reason"]


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
