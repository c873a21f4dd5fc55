"""The stability probe: a small fixed set of requests, each sent again and again, identical to the byte, greedy
(temperature 0, a fixed seed), so a deterministic server must give each the same answer every time, before,
during and after a fault (judged by chaos/verify/stability.py; docs/stability.md).

Each probe is one of QUESTIONS; the last `structured` of them ask for JSON (response_format json_object, or, with
json_schema, every other one a json_schema). No probe fixes its length (no ignore_eos): the model must be free to
stop, which is what the truncation check watches. The probe a request sends is drawn from the workload's seeded
per-request generator, so a run is reproducible. Every probe carries its key (s<index>-<kind>) on its record.

Mixed into another workload by the load key `stability: {share: 20%, ...}` (with_stability, used by
chaos/experiment/loadspec.py), or by weight as a workload of its own (`mix: {chat: 4, stability: 1}`, `--mix`).
"""

from __future__ import annotations

import random

from ..common import parse_percent
from .spec import WorkloadSpec

QUESTIONS = (
    "Explain in two sentences why a load balancer retries a failed request.",
    "Our parcel arrived damaged. What should the customer do first?",
    "List three reasons a streamed answer can stop early.",
    "What does a circuit breaker do in front of a model server? Answer briefly.",
    "Summarise the refund policy for a late shipment in one sentence.",
    "Why does a long prompt make the first token slower?",
    "Give two ways to make a gateway survive a replica crash.",
    "What is a KV cache, in one sentence?",
    "Describe a canary deployment to a new engineer.",
    "Which metric shows that requests are queueing?",
    "Name one cause of a sudden rise in 429 answers.",
    "How should a client react to a Retry-After header?",
    "What is the difference between time to first token and end-to-end latency?",
    "Why would two replicas give different answers to the same greedy request?",
    "Suggest a timeout for a chat request and say why.",
    "What happens to streams in flight when a replica is killed?",
)
MAX_PROMPTS = len(QUESTIONS)
JSON_ASK = " Reply with one JSON object with the keys answer (a string) and confidence (a number from 0 to 1)."
SCHEMA = {"name": "answer", "strict": True,
          "schema": {"type": "object", "additionalProperties": False, "required": ["answer", "confidence"],
                     "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}}}}
DEFAULTS = {"prompts": 4, "structured": 1, "json_schema": False, "max_tokens": 64, "seed": 1234}
OPTIONS = tuple(DEFAULTS)
DEFAULT_SHARE = "20%"


def options(extra: dict | None) -> dict:
    """The probe settings from a spec's extra, defaults filled in, checked (ValueError says what to write)."""
    o = {**DEFAULTS, **{k: v for k, v in (extra or {}).items() if k in OPTIONS}}
    n, s = o["prompts"], o["structured"]
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PROMPTS:
        raise ValueError(f"stability.prompts must be a whole number from 1 to {MAX_PROMPTS}, got {n!r}")
    if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s <= n:
        raise ValueError(f"stability.structured ({s!r}) counts the prompts that ask for JSON: from 0 to "
                         f"prompts ({n})")
    if not isinstance(o["max_tokens"], int) or isinstance(o["max_tokens"], bool) or o["max_tokens"] < 1:
        raise ValueError(f"stability.max_tokens must be a whole number of at least 1, got {o['max_tokens']!r}")
    return o


def probe_kind(i: int, o: dict) -> str:
    """chat, json_object or json_schema: the last `structured` probes ask for JSON."""
    first = o["prompts"] - o["structured"]
    if i < first:
        return "chat"
    return "json_schema" if o["json_schema"] and (i - first) % 2 else "json_object"


def probe(i: int, o: dict) -> tuple[str, dict]:
    """(key, body without model and stream) of probe i: the same for every request that sends it."""
    kind = probe_kind(i, o)
    body = {"messages": [{"role": "user", "content": QUESTIONS[i] + (JSON_ASK if kind != "chat" else "")}],
            "max_tokens": o["max_tokens"], "temperature": 0, "seed": o["seed"]}
    if kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        body["response_format"] = {"type": "json_schema", "json_schema": SCHEMA}
    return f"s{i}-{kind}", body


def probe_for(extra: dict | None, rng: random.Random) -> tuple[str, dict]:
    """(key, body) of one probe of the stability workload (chaos.load.workloads.Workload.request's case). The
    output's JSON is judged by the stability check (json_valid), not made an error: the request does not expect
    JSON, so a server that ignores response_format (the reference server) fails that check, not the run's error
    rate and steady state."""
    o = options(extra)
    return probe(rng.randrange(o["prompts"]), o)


def with_stability(specs: list, setting: dict) -> list:
    """The load's workload specs [(WorkloadSpec, weight)] with the probes of the load key `stability:` mixed in:
    its options go to every stability spec; when the mix names none, one is added at `share` of the requests
    (default 20%; 100%: probes only). A share is what one means by "a fifth of the requests are probes", and it
    holds whatever the other weights add up to."""
    setting = dict(setting or {})
    share = setting.pop("share", None)
    extra = {k: v for k, v in setting.items() if k in OPTIONS}
    options(extra)
    if any(s.name == "replay" for s, _ in specs):
        raise ValueError("stability probes mix into generated workloads; a replay sends its log as it is "
                         "(drop load.stability, or replay without it)")
    named = [(s, w) for s, w in specs if s.name == "stability"]
    if named:
        if share is not None:
            raise ValueError("the mix already weighs the stability workload: give its share there or in "
                             "stability.share, not both")
        return [(WorkloadSpec("stability", extra=extra) if s.name == "stability" else s, w) for s, w in specs]
    fraction = parse_percent(share if share is not None else DEFAULT_SHARE)
    if not 0 < fraction <= 1:
        raise ValueError(f"stability.share must be above 0% and at most 100%, got {share!r}")
    probes = WorkloadSpec("stability", extra=extra)
    if fraction >= 1:
        return [(probes, 1.0)]
    total = sum(w for _, w in specs)
    return [*specs, (probes, total * fraction / (1 - fraction))]
