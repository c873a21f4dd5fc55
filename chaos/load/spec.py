"""What a workload is made of: a named spec with its parameters (WorkloadSpec) and one request it makes
(LLMRequest). Its own module so that the workloads and the stability probes both build on it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sizes import sizes, token_range


@dataclass(slots=True)
class LLMRequest:
    case: str
    endpoint: str  # chat | completion
    body: dict  # the request body without model and stream
    input_tokens: int
    input_tokens_source: str  # exact | estimate
    expect_json: bool = False
    offset_s: float | None = None  # replay: when the original request was sent, relative to the first
    fixed_output: bool = False  # max_tokens is the length asked for, not just a cap
    source_line: int | None = None  # replay: the request's line in the log, so a failure traces back
    scrubbed: dict | None = None  # replay --scrub: what was redacted from this request (kind -> count, no values)
    stability_key: str | None = None  # a stability probe's identity (chaos.load.stability)



@dataclass(slots=True)
class WorkloadSpec:
    """One named workload with its parameters (the defaults follow the seed's test plan)."""

    name: str
    input_tokens: object = None  # int, "lo-hi", or sizes ([1000, 2000, 4000] or "1000,2000,4000")
    output_tokens: object = None
    temperature: float = 0.0
    replay_file: str | None = None
    extra: dict = field(default_factory=dict)

    DEFAULTS = {
        "chat": ("24-120", "32-128"),
        "completion": ("24-120", "32-128"),  # legacy /v1/completions with a plain prompt
        "rag": ("3000", "200-500"),
        "long": ("10000", "64-128"),
        "prefix": ("1040-1080", "32-96"),  # a shared 1,000-token system prompt, then a question
        "json": ("90-160", "64-160"),
        "replay": (None, None),
        "stability": (None, None),  # identical greedy probes with their own prompts (chaos.load.stability)
    }

    def __post_init__(self):
        if self.name not in self.DEFAULTS:
            raise ValueError(f"unknown workload {self.name!r}; choose one of: {', '.join(self.DEFAULTS)}")
        din, dout = self.DEFAULTS[self.name]
        self.input_tokens = token_range(self.input_tokens if self.input_tokens is not None else din or 1,
                                        "input_tokens")
        self.output_tokens = token_range(self.output_tokens if self.output_tokens is not None else dout or 1,
                                         "output_tokens")
        if self.name == "replay" and not self.replay_file:
            raise ValueError("the replay workload needs a file (--replay FILE)")
        if sizes(self.output_tokens):
            raise ValueError("output_tokens takes a size or a range LO-HI; a list of sizes is for input_tokens")
