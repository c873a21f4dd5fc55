"""Named, parameterised, reproducible workloads: what each request asks for.

A workload turns (seed, request index) into one request body, so the same seed gives
the same requests on every run and every worker.

input_tokens is the prompt as the server counts it (usage.prompt_tokens): template, BOS
and all. Against the reference server (byte-level: one token a UTF-8 byte, BOS first, chat
in ChatML) the counts are exact and every request hits its size; against other servers
they are an estimate (~4 bytes a token) and each request says so. A size below what a
case's fixed text alone takes is refused, not silently exceeded.

output_tokens is max_tokens; where a case fixes the output length (every generated case
but json, whose object must be allowed to end) the request also carries vLLM's
ignore_eos, so a model's EOS cannot end the stream early.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..reference.tokenizer import ByteTokenizer
from .replaylog import ReplayCursor, ReplayScan, scan_replay

WORDS = ("latency throughput replica gateway cache block token stream request server model batch queue "
         "timeout retry fallback prefix decode prefill memory bandwidth kernel tensor scheduler budget "
         "window context answer question document section policy customer order invoice shipment warehouse "
         "account balance report quarter revenue contract clause payment refund ticket incident outage "
         "deploy rollback canary region zone node pod container volume network packet route").split()


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


class TokenCounter:
    """Exact counts for the byte-level reference tokenizer, ~4 bytes a token otherwise."""

    def __init__(self, kind: str = "byte"):
        if kind not in ("byte", "estimate"):
            raise ValueError("tokenizer must be 'byte' or 'estimate'")
        self.kind = kind
        self._tok = ByteTokenizer()

    @property
    def source(self) -> str:
        return "exact" if self.kind == "byte" else "estimate"

    def count_text(self, text: str) -> int:
        n = len(text.encode("utf-8"))
        return n if self.kind == "byte" else max(1, round(n / 4))

    def count_chat(self, messages: list[dict]) -> int:
        if self.kind == "byte":
            return self._tok.count_chat(messages)  # what the reference server counts, without building the ids
        return sum(self.count_text(m["content"]) + 4 for m in messages) + 3

    def count_prompt(self, prompt: str) -> int:
        return self._tok.count(prompt) if self.kind == "byte" else self.count_text(prompt)

    def bytes_for(self, tokens: int) -> int:
        return tokens if self.kind == "byte" else tokens * 4


def filler_text(rng: random.Random, n_bytes: int, topic: str = "") -> str:
    """ASCII prose of exactly n_bytes bytes."""
    words, size = ([topic], len(topic)) if topic else ([], -1)  # size: the joined length so far (no leading space)
    while size < n_bytes:
        w = rng.choice(WORDS)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:n_bytes]


def _range(v, name) -> tuple[int, ...]:
    """(lo, hi) for a size or a range; for a list of sizes, the sizes sorted, at least three entries.

    A pair is always a range: the load driver hands each Locust process list(spec.input_tokens), so [lo, hi]
    must read back as the range it came from. Two sizes are therefore kept as (a, b, b), which reads back as
    the same two sizes (sizes() drops the repeat); a pair written by hand is a range, which is why the schema
    takes a list of sizes only from three up (two sizes: the text form "1000,16000")."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    try:
        if isinstance(v, str) and "," in v:
            return _sizes([int(x) for x in v.split(",") if x.strip()], name)
        if isinstance(v, str) and "-" in v:
            lo, hi = v.split("-", 1)
            lo, hi = int(lo), int(hi)
            if 0 < lo <= hi:
                return lo, hi
        elif isinstance(v, str):
            return int(v), int(v)
        if isinstance(v, (list, tuple)) and len(v) == 2:
            return int(v[0]), int(v[1])
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return _sizes(list(v), name)
    except ValueError:
        pass
    raise ValueError(f"{name} must be an integer, a range like 200-500, or a list of sizes like "
                     f"1000,2000,4000 (each at least 1), got {v!r}")


def _sizes(values: list[int], name: str) -> tuple[int, ...]:
    got = sorted(set(values))
    if not got or got[0] < 1:
        raise ValueError(f"{name}: every size must be at least 1, got {values!r}")
    if len(got) == 1:
        return got[0], got[0]
    return tuple(got) if len(got) > 2 else (got[0], got[1], got[1])


def sizes(r: tuple[int, ...]) -> tuple[int, ...] | None:
    """The distinct sizes of a list of sizes made by _range; None for a range (lo, hi)."""
    return tuple(sorted(set(r))) if len(r) > 2 else None


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
    }

    def __post_init__(self):
        if self.name not in self.DEFAULTS:
            raise ValueError(f"unknown workload {self.name!r}; choose one of: {', '.join(self.DEFAULTS)}")
        din, dout = self.DEFAULTS[self.name]
        self.input_tokens = _range(self.input_tokens if self.input_tokens is not None else din or 1, "input_tokens")
        self.output_tokens = _range(self.output_tokens if self.output_tokens is not None else dout or 1,
                                    "output_tokens")
        if self.name == "replay" and not self.replay_file:
            raise ValueError("the replay workload needs a file (--replay FILE)")
        if sizes(self.output_tokens):
            raise ValueError("output_tokens takes a size or a range LO-HI; a list of sizes is for input_tokens")


class Workload:
    """A weighted mix of workload specs; request i is the same for a given seed wherever it is made."""

    def __init__(self, specs: list[tuple[WorkloadSpec, float]], seed: int = 0, tokenizer: str = "byte",
                 system_prompt_tokens: int = 1000, ignore_eos: bool = True):
        if not specs:
            raise ValueError("a workload needs at least one case")
        self.specs = specs
        self.seed = seed
        self.ignore_eos = ignore_eos
        self.counter = TokenCounter(tokenizer)
        total = sum(w for _, w in specs)
        if total <= 0:
            raise ValueError("workload weights must add up to more than 0")
        self.cum = []
        acc = 0.0
        for _, w in specs:
            acc += w / total
            self.cum.append(acc)
        rng = random.Random(seed ^ 0x5EED)
        self.system_prompt = filler_text(rng, self.counter.bytes_for(system_prompt_tokens),
                                         "You are the support assistant of an online shop. Policies:")
        self._replay_cursors: dict[str, ReplayCursor] = {}
        self.replay_scans: dict[str, ReplayScan] = {}
        for spec, _ in specs:
            if spec.name == "replay":
                # a bounded pre-scan: the file is streamed when sending, never held
                self.replay_scans[spec.replay_file] = scan_replay(spec.replay_file, options=_options(spec))
                self._replay_cursors[spec.replay_file] = ReplayCursor(spec.replay_file, _options(spec))
            elif spec.input_tokens[0] < self.floor(spec.name):
                raise ValueError(
                    f"input_tokens {spec.input_tokens[0]} is below what the {spec.name} workload's own text takes "
                    f"({self.floor(spec.name)} tokens {'exactly' if self.counter.kind == 'byte' else 'estimated'}, "
                    f"template included; input_tokens counts the whole prompt as the server does): ask for at "
                    f"least {self.floor(spec.name)}")

    def request(self, index: int) -> LLMRequest:
        rng = random.Random(self.seed * 1_000_003 + index)
        pick = rng.random()
        spec = next(s for (s, _), c in zip(self.specs, self.cum) if pick <= c + 1e-12)
        if spec.name == "replay":
            return self._replay(spec, index)
        steps = sizes(spec.input_tokens)
        target = rng.randint(*spec.input_tokens) if steps is None else self._size_at(steps, index)
        max_tokens = rng.randint(*spec.output_tokens)
        content = filler_text(rng, self.counter.bytes_for(target - self._overhead(spec.name)))
        if spec.name == "completion":
            body = {"prompt": content}
            counted = self.counter.count_prompt(content)
        else:
            body = {"messages": self._messages(spec.name, content)}
            counted = self.counter.count_chat(body["messages"])
        body.update(max_tokens=max_tokens, temperature=spec.temperature)
        expect_json = spec.name == "json"
        if expect_json:
            body["response_format"] = {"type": "json_object"}
        fixed = not expect_json
        if fixed and self.ignore_eos:
            body["ignore_eos"] = True
        return LLMRequest(spec.name, "completion" if spec.name == "completion" else "chat", body, counted,
                          self.counter.source, expect_json, fixed_output=fixed)

    def _size_at(self, steps: tuple[int, ...], index: int) -> int:
        """Request index's size from a list: each run of len(steps) requests takes every size once, in a
        seeded order, so the sizes are interleaved through the run (drift over time, a neighbour's burst, cannot
        pass for growth with size) and equally many of each are sent."""
        block, pos = divmod(index, len(steps))
        order = list(steps)
        random.Random(f"sizes/{self.seed}/{block}").shuffle(order)
        return order[pos]

    # -- cases: the fixed text around the filler content --------------------------------------
    def _messages(self, case: str, c: str) -> list[dict]:
        if case == "rag":
            return [{"role": "system", "content": "Answer from the documents only."},
                    {"role": "user", "content": f"Documents:\n{c}\n\nQuestion: what does the policy say?"}]
        if case == "long":
            return [{"role": "user", "content": f"Summarise this log:\n{c}"}]
        if case == "prefix":
            return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": c}]
        if case == "json":
            return [{"role": "system", "content": "Reply with one JSON object with keys intent and reply."},
                    {"role": "user", "content": c}]
        return [{"role": "user", "content": c}]

    def _overhead(self, case: str) -> int:
        """Tokens of the case's fixed text (template, BOS) around empty content."""
        if case == "completion":
            return self.counter.count_prompt("")
        return self.counter.count_chat(self._messages(case, ""))

    def floor(self, case: str) -> int:
        """The smallest input_tokens the case can hit: its fixed text and one byte of content (the reference
        server refuses a chat whose every message is empty)."""
        return self._overhead(case) + 1

    def _replay(self, spec, i):
        e, offset, lineno = self._replay_cursors[spec.replay_file].at(i)
        return replay_request(e, self.counter, offset, lineno, self.ignore_eos)


def _options(spec):
    from .replayopts import ReplayOptions

    return ReplayOptions.of(spec.extra)


def replay_request(e: dict, counter: TokenCounter, offset: float | None = None,
                   lineno: int | None = None, ignore_eos: bool = True) -> LLMRequest:
    """One logged request body as the user sends it (model and stream are the run's own). A trace's request
    (synthesised prompt) asks for exactly the trace's output length: ignore_eos, where the target allows it."""
    from .replayopts import FIXED_KEY, SCRUBBED_KEY

    body = {k: v for k, v in e.items() if k not in ("timestamp", "offset_s", "case", "model", "stream",
                                                  "stream_options", FIXED_KEY, SCRUBBED_KEY)}
    fixed = e.get(FIXED_KEY) is True
    if fixed and ignore_eos:
        body["ignore_eos"] = True
    endpoint = "chat" if "messages" in body else "completion"
    if endpoint == "chat" and isinstance(body.get("messages"), list) and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in body["messages"]):
        n = counter.count_chat(body["messages"])
    elif isinstance(body.get("prompt"), str):
        n = counter.count_prompt(body["prompt"])
    else:
        n = 0  # malformed on purpose (replayed abnormal input): the target must say so
    return LLMRequest(e.get("case") or "replay", endpoint, body, n, counter.source,
                      bool((body.get("response_format") or {}).get("type") == "json_object"), offset,
                      fixed_output=fixed, source_line=lineno, scrubbed=e.get(SCRUBBED_KEY))


def parse_mix(text: str) -> list[tuple[str, float]]:
    """'chat=3,rag=1' or 'rag' -> [(name, weight)]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, w = part.partition("=")
        try:
            out.append((name.strip(), float(w) if w else 1.0))
        except ValueError:
            raise ValueError(f"bad workload weight in {part!r}: write name=weight, e.g. chat=3,rag=1") from None
    return out
