"""Reading an OpenAI-style SSE stream line by line, and judging what came back."""

from __future__ import annotations

import json


class StreamState:
    """Feed it the lines of an SSE body; it tracks content, usage, errors and [DONE]."""

    __slots__ = ("done", "usage", "error", "malformed", "content_chunks", "text_parts", "served_by", "finish_reason")

    def __init__(self):
        self.done = False
        self.usage: dict | None = None
        self.error: dict | None = None
        self.malformed: str | None = None
        self.content_chunks = 0
        self.text_parts: list[str] = []
        self.served_by: str | None = None
        self.finish_reason: str | None = None

    def feed(self, line: bytes | str) -> str | None:
        """Process one line; returns the new content text it carried ('' for none)."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        line = line.rstrip("\r\n")
        if not line or line.startswith(":"):
            return ""  # blank separator or keep-alive comment
        if not line.startswith("data:"):
            if line.startswith(("event:", "id:", "retry:")):
                return ""
            self.malformed = self.malformed or f"not an SSE line: {line[:60]!r}"
            return ""
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return ""
        try:
            obj = json.loads(data)
        except ValueError:
            self.malformed = self.malformed or f"chunk is not JSON: {data[:60]!r}"
            return ""
        if not isinstance(obj, dict):
            self.malformed = self.malformed or "chunk is not a JSON object"
            return ""
        if "error" in obj:
            self.error = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
            return ""
        if obj.get("usage"):
            self.usage = obj["usage"]
        self.served_by = obj.get("system_fingerprint") or self.served_by
        text = ""
        for choice in obj.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
            if piece:
                text += piece
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if text:
            self.content_chunks += 1
            self.text_parts.append(text)
        return text

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


def error_code_of(body: bytes | str | None) -> tuple[str | None, str | None]:
    """(code, message) from an OpenAI-shaped error body, tolerating other shapes."""
    if not body:
        return None, None
    try:
        obj = json.loads(body)
    except (ValueError, TypeError):
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        return None, text[:200]
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        code = err.get("code") or err.get("type")
        return (str(code) if code is not None else None), str(err.get("message", ""))[:200]
    if isinstance(err, str):
        return None, err[:200]
    return None, None


def quantile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of an already sorted list."""
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]
