"""What the readers yield: one Item per request read, one Problem per line that could not be read."""

from __future__ import annotations

from dataclasses import dataclass

ENDPOINTS = ("chat", "completion")


@dataclass(slots=True)
class Item:
    line_no: int  # 1-based line of the source file (for CSV: the line the row starts on), so a failure traces back
    offset_s: float | None  # seconds since the first timed item of the file; None when the line has no time
    endpoint: str  # chat | completion
    body: dict  # an OpenAI request body (for a trace without text: a synthesised one)
    input_tokens: int | None = None  # as the source states it (trace columns, a response's usage), else None
    output_tokens: int | None = None
    status: int | None = None  # the logged response's HTTP status (envelopes, mapped logs)
    error_code: str | None = None  # the logged response's error code/type, e.g. "context_length_exceeded"
    hash_ids: list[int] | None = None  # Mooncake: one id per 512-token block of the prompt
    failed: bool = False  # the source marks the request as failed (BurstGPT: 0 response tokens; status >= 400)
    headers: dict | None = None  # the logged request headers (envelopes), to be scrubbed before use
    case: str | None = None  # a "case" tag on the line (abnormal-input logs), kept for the report
    fmt: str = ""  # the format the line was read as: openai | envelope | mapped | azure | burstgpt | mooncake

    def __post_init__(self):
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, not {self.endpoint!r}")
        if not isinstance(self.body, dict):
            raise ValueError("body must be a dict (an OpenAI request body)")


@dataclass(slots=True)
class Problem:
    line_no: int
    why: str  # what is wrong with the line, for the user to fix or ignore; never the line's content (PII)
    fmt: str = ""

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.why}"
