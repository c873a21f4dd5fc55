"""Named, parameterised, reproducible workloads: what each request asks for.

A workload turns (seed, request index) into one request body, so the same seed gives
the same requests on every run and every worker. Input sizes are exact token counts
where the target's tokenizer is known (the reference server is byte-level: one token a
UTF-8 byte, plus its chat template) and an estimate (~4 bytes a token) otherwise; each
request says which.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from ..reference.tokenizer import ByteTokenizer

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
            return len(self._tok.apply_chat_template(messages))
        return sum(self.count_text(m["content"]) + 4 for m in messages) + 3

    def count_prompt(self, prompt: str) -> int:
        return len(self._tok.encode(prompt)) if self.kind == "byte" else self.count_text(prompt)

    def bytes_for(self, tokens: int) -> int:
        return tokens if self.kind == "byte" else tokens * 4


def filler_text(rng: random.Random, n_bytes: int, topic: str = "") -> str:
    """ASCII prose of exactly n_bytes bytes."""
    words, size = [], 0
    if topic:
        words.append(topic)
        size = len(topic)
    while size < n_bytes:
        w = rng.choice(WORDS)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:n_bytes]


def _range(v, name) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    try:
        if isinstance(v, str) and "-" in v:
            lo, hi = v.split("-", 1)
            lo, hi = int(lo), int(hi)
            if 0 < lo <= hi:
                return lo, hi
        elif isinstance(v, str):
            return int(v), int(v)
    except ValueError:
        pass
    if isinstance(v, (list, tuple)) and len(v) == 2:
        return int(v[0]), int(v[1])
    raise ValueError(f"{name} must be an integer or a range like 200-500, got {v!r}")


@dataclass(slots=True)
class WorkloadSpec:
    """One named workload with its parameters (the defaults follow the seed's test plan)."""

    name: str
    input_tokens: object = None  # int or "lo-hi"
    output_tokens: object = None
    temperature: float = 0.0
    replay_file: str | None = None
    extra: dict = field(default_factory=dict)

    DEFAULTS = {
        "chat": ("20-120", "32-128"),
        "rag": ("3000", "200-500"),
        "long": ("10000", "64-128"),
        "prefix": ("40-80", "32-96"),  # input: the question after a shared ~1,000-token system prompt
        "json": ("30-80", "64-160"),
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


class Workload:
    """A weighted mix of workload specs; request i is the same for a given seed wherever it is made."""

    def __init__(self, specs: list[tuple[WorkloadSpec, float]], seed: int = 0, tokenizer: str = "byte",
                 system_prompt_tokens: int = 1000):
        if not specs:
            raise ValueError("a workload needs at least one case")
        self.specs = specs
        self.seed = seed
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
        self._replay_entries: dict[str, list[dict]] = {}
        for spec, _ in specs:
            if spec.name == "replay":
                self._replay_entries[spec.replay_file] = load_replay(spec.replay_file)

    def request(self, index: int) -> LLMRequest:
        rng = random.Random(self.seed * 1_000_003 + index)
        pick = rng.random()
        spec = next(s for (s, _), c in zip(self.specs, self.cum) if pick <= c + 1e-12)
        return getattr(self, f"_{spec.name}")(spec, rng, index)

    # -- cases -------------------------------------------------------------------------------
    def _chat_request(self, case, spec, rng, messages_for, expect_json=False) -> LLMRequest:
        target = rng.randint(*spec.input_tokens)
        # Size the content so the whole templated prompt lands on target tokens (exact for byte counting).
        overhead = self.counter.count_chat(messages_for(""))
        content = filler_text(rng, max(1, self.counter.bytes_for(max(1, target - overhead))))
        messages = messages_for(content)
        body = {"messages": messages, "max_tokens": rng.randint(*spec.output_tokens), "temperature": spec.temperature}
        if expect_json:
            body["response_format"] = {"type": "json_object"}
        return LLMRequest(case, "chat", body, self.counter.count_chat(messages), self.counter.source, expect_json)

    def _chat(self, spec, rng, i):
        return self._chat_request("chat", spec, rng, lambda c: [{"role": "user", "content": c}])

    def _rag(self, spec, rng, i):
        def msgs(c):
            return [{"role": "system", "content": "Answer from the documents only."},
                    {"role": "user", "content": f"Documents:\n{c}\n\nQuestion: what does the policy say?"}]
        return self._chat_request("rag", spec, rng, msgs)

    def _long(self, spec, rng, i):
        def msgs(c):
            return [{"role": "user", "content": f"Summarise this log:\n{c}"}]
        return self._chat_request("long", spec, rng, msgs)

    def _prefix(self, spec, rng, i):
        def msgs(c):
            return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": c}]
        req = self._chat_request("prefix", spec, rng, lambda c: [{"role": "user", "content": c}])
        req.body["messages"] = msgs(req.body["messages"][0]["content"])
        req.input_tokens = self.counter.count_chat(req.body["messages"])
        return req

    def _json(self, spec, rng, i):
        def msgs(c):
            return [{"role": "system", "content": "Reply with one JSON object with keys intent and reply."},
                    {"role": "user", "content": c}]
        return self._chat_request("json", spec, rng, msgs, expect_json=True)

    def _replay(self, spec, rng, i):
        entries = self._replay_entries[spec.replay_file]
        e = entries[i % len(entries)]
        body = {k: v for k, v in e.items() if k not in ("timestamp", "offset_s", "case", "model", "stream",
                                                      "stream_options")}
        endpoint = "chat" if "messages" in body else "completion"
        if endpoint == "chat" and isinstance(body.get("messages"), list) and all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in body["messages"]):
            n = self.counter.count_chat(body["messages"])
        elif isinstance(body.get("prompt"), str):
            n = self.counter.count_prompt(body["prompt"])
        else:
            n = 0  # malformed on purpose (replayed abnormal input): the target must say so
        cycle = i // len(entries)
        offset = e.get("offset_s")
        if offset is not None and entries[-1].get("offset_s") is not None:
            offset += cycle * (entries[-1]["offset_s"] + 1.0)
        return LLMRequest(e.get("case") or "replay", endpoint, body, n, self.counter.source,
                          bool((body.get("response_format") or {}).get("type") == "json_object"), offset)


def load_replay(path: str) -> list[dict]:
    """Requests from a JSONL log: OpenAI bodies, optionally with timestamp (epoch s) and case."""
    entries = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError as err:
                raise ValueError(f"{path}:{lineno}: not JSON ({err})") from None
            if not isinstance(e, dict) or ("messages" not in e and "prompt" not in e):
                raise ValueError(f"{path}:{lineno}: each line needs 'messages' or 'prompt'")
            entries.append(e)
    if not entries:
        raise ValueError(f"{path}: no requests in the replay file")
    stamps = [e.get("timestamp") for e in entries]
    if all(isinstance(t, (int, float)) for t in stamps):
        t0 = min(stamps)
        for e in entries:
            e["offset_s"] = e["timestamp"] - t0
        entries.sort(key=lambda e: e["offset_s"])
    return entries


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
