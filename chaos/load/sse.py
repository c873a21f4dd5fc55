"""Reading an OpenAI-style SSE stream line by line, timing it, and judging what came back."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

# Raw inter-token gaps a record keeps (integer microseconds, ~6 bytes each in JSON): 20,000 gaps is an output of
# 20,000 chunks, ~120 KB of record. Past it the gaps are counted but not kept (max_itl stays exact).
MAX_GAPS = 20_000


class StreamState:
    """Feed it the lines of an SSE body; it tracks content, usage, errors and [DONE]."""

    __slots__ = ("done", "usage", "error", "malformed", "content_chunks", "text_parts", "served_by", "finish_reason",
                 "server_timing")

    def __init__(self):
        self.done = False
        self.usage: dict | None = None
        self.error: dict | None = None
        self.malformed: str | None = None
        self.content_chunks = 0
        self.text_parts: list[str] = []
        self.served_by: str | None = None
        self.finish_reason: str | None = None
        self.server_timing: dict | None = None  # the reference server's chaos_timing extension, when sent

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
        # Every field is checked for its type: a chunk of the wrong shape raised AttributeError here, which the
        # user took for a transport failure (connect_error) and, nothing having streamed, retried.
        usage, choices = obj.get("usage"), obj.get("choices")
        if usage is not None and not isinstance(usage, dict):
            return self._bad(f"usage is a {type(usage).__name__}, not an object")
        if choices is not None and not isinstance(choices, list):
            return self._bad(f"choices is a {type(choices).__name__}, not a list")
        if usage:
            self.usage = usage
        if isinstance(obj.get("system_fingerprint"), str):
            self.served_by = obj["system_fingerprint"] or self.served_by
        if isinstance(obj.get("chaos_timing"), dict):
            self.server_timing = obj["chaos_timing"]
        text = ""
        for choice in choices or []:
            if not isinstance(choice, dict):
                return self._bad(f"a choice is a {type(choice).__name__}, not an object")
            if "delta" in choice:
                delta = choice["delta"]
                if delta is not None and not isinstance(delta, dict):
                    return self._bad(f"delta is a {type(delta).__name__}, not an object")
                piece = (delta or {}).get("content")
            else:
                piece = choice.get("text")
            finish = choice.get("finish_reason")
            if not isinstance(piece, (str, type(None))) or not isinstance(finish, (str, type(None))):
                return self._bad("content, text or finish_reason is not a string")
            if piece:
                text += piece
            if finish:
                self.finish_reason = finish
        if text:
            self.content_chunks += 1
            self.text_parts.append(text)
        return text

    def _bad(self, why: str) -> str:
        self.malformed = self.malformed or f"malformed chunk: {why}"
        return ""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


@dataclass(slots=True)
class StreamTiming:
    """When content came, on the monotonic clock (perf_counter seconds), and the gaps between content chunks."""

    first: float | None = None  # the first line that carried non-empty content
    last: float | None = None
    gaps_us: list[int] = field(default_factory=list)  # consecutive content chunks, integer microseconds
    dropped: int = 0  # gaps past MAX_GAPS: counted, not kept
    max_gap: float | None = None  # seconds, over every gap (kept or not)


def read_stream(readline, state: StreamState, t: StreamTiming, on_first=None, mono=time.perf_counter,
                max_gaps: int = MAX_GAPS) -> StreamTiming:
    """Feed state every line readline() returns until [DONE], an error event or the end of the body, timing
    each content chunk in t the moment its line arrived (before it is parsed: the JSON decode is the client's
    time, not the server's). t keeps what was read when readline raises (a reset, a timeout). mono must be
    monotonic; on_first() runs at the first content (to cancel a timer)."""
    gaps = t.gaps_us
    while True:
        line = readline()
        if not line:
            break
        now = mono()
        if state.feed(line):
            if t.first is None:
                t.first = now
                if on_first is not None:
                    on_first()
            else:
                gap = now - t.last
                if t.max_gap is None or gap > t.max_gap:
                    t.max_gap = gap
                if len(gaps) < max_gaps:
                    gaps.append(round(gap * 1e6))
                else:
                    t.dropped += 1
            t.last = now
        if state.error is not None or state.done:
            break
    return t


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
