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

from ..sizes import sizes
from . import stability
from .replay.log import ReplayCursor, ReplayScan, scan_replay
from .spec import LLMRequest, WorkloadSpec
from .tokens import TokenCounter

__all__ = ["LLMRequest", "Workload", "WorkloadSpec", "filler_text"]

WORDS = ("latency throughput replica gateway cache block token stream request server model batch queue "
         "timeout retry fallback prefix decode prefill memory bandwidth kernel tensor scheduler budget "
         "window context answer question document section policy customer order invoice shipment warehouse "
         "account balance report quarter revenue contract clause payment refund ticket incident outage "
         "deploy rollback canary region zone node pod container volume network packet route").split()


def filler_text(rng: random.Random, n_bytes: int, topic: str = "") -> str:
    """ASCII prose of exactly n_bytes bytes."""
    words, size = ([topic], len(topic)) if topic else ([], -1)  # size: the joined length so far (no leading space)
    while size < n_bytes:
        w = rng.choice(WORDS)
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:n_bytes]


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
            elif spec.name != "stability" and spec.input_tokens[0] < self.floor(spec.name):
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
        if spec.name == "stability":
            key, body = stability.probe_for(spec.extra, rng)
            return LLMRequest("stability", "chat", body, self.counter.count_chat(body["messages"]),
                              self.counter.source, stability_key=key)
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
    from .replay.opts import ReplayOptions

    return ReplayOptions.of(spec.extra)


def replay_request(e: dict, counter: TokenCounter, offset: float | None = None,
                   lineno: int | None = None, ignore_eos: bool = True) -> LLMRequest:
    """One logged request body as the user sends it (model and stream are the run's own). A trace's request
    (synthesised prompt) asks for exactly the trace's output length: ignore_eos, where the target allows it."""
    from .replay.opts import FIXED_KEY, SCRUBBED_KEY

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
