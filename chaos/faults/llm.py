"""LLM faults: rules for the SSE-aware fault proxy on a link (chaos.proxy.llm): synthetic answers (429 storms, 5xx,
hangs, dropped connections, broken bodies), faults on token streams (delays, stalls, cuts, resets, corrupt or
duplicated chunks, an error event on a 200), altered content, and slow or delayed requests.

apply adds one rule to each LLM proxy of the link over its admin API (the run's fault token); revert removes it,
which also ends what it was doing to streams in flight (a stall ends, the stream goes on). Every request a rule
touched is labelled in the load's records (the proxy's x-chaos-fault header, and its log by request id).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..schemabits import BOOL, PERCENT, integer, obj
from .base import Fault, FaultContext, FaultError, LinkFault, LinkParams, link_setting
from .admin import call, post_each
from .params import params_from_table, setting

# fault type -> (the proxy's effect, {setting: (the effect's param, kind)}); kind: s (a duration, sent in seconds),
# int, num, str, bool, or an enum as a tuple. Each type's schema is built from this (LLM_FAULT_TYPES, below).
AFTER = {"after_tokens": ("after_tokens", "int")}
LLM_FAULTS: dict[str, tuple[str, dict]] = {
    "http_error": ("status", {"status": ("status", (400, 401, 403, 429, 500, 502, 503, 504)),
                              "retry_after": ("retry_after", "s"), "code": ("code", "str"),
                              "message": ("message", "str")}),
    "rate_limit_storm": ("storm", {"status": ("status", (429, 503)), "length": ("length", "int"),
                                   "recover": ("recover", "int"), "repeat": ("repeat", "bool"),
                                   "retry_after": ("retry_after", "s")}),
    "hang": ("hang", {"max": ("max_s", "s")}),
    "drop_connection": ("close", {}),
    "bad_body": ("bad_body", {"kind": ("kind", ("empty", "truncated", "invalid_json"))}),
    "first_token_delay": ("first_token_delay", {"delay": ("delay_s", "s"),
                                                "where": ("where", ("before_headers", "after_headers"))}),
    "token_delay": ("token_delay", {"delay": ("delay_s", "s"), "jitter": ("jitter_s", "s")}),
    "stream_stall": ("stall", {**AFTER, "stall_for": ("for_s", "s")}),
    "stream_cut": ("cut", AFTER),
    "stream_reset": ("reset", AFTER),
    "corrupt_chunk": ("corrupt", AFTER),
    "stream_error_event": ("error_event", AFTER),
    "drop_usage": ("drop_usage", {}),
    "drop_done": ("drop_done", {}),
    "duplicate_chunk": ("duplicate", AFTER),
    "reorder_chunks": ("reorder", AFTER),
    "replace_text": ("replace_text", {"text": ("text", "str")}),
    "garble_text": ("garble", {}),
    "enlarge_text": ("enlarge", {"factor": ("factor", "num")}),
    "break_json": ("break_json", {}),
    "slow_upload": ("slow_upload", {"rate": ("rate", "int")}),
    "delay_request": ("delay", {"delay": ("delay_s", "s")}),
}
REQUIRED = {"stream_stall": ["after_tokens", "stall_for"], "replace_text": ["text"], "slow_upload": ["rate"],
            "delay_request": ["delay"], "first_token_delay": ["delay"], "token_delay": ["delay"]}
SUMMARIES = {
    "http_error": "answer with an OpenAI-shaped error instead of the upstream (429 with Retry-After, 401, 5xx ...)",
    "rate_limit_storm": "a storm of 429s: length in a row, then recover requests pass (repeat: cycle)",
    "hang": "hold requests, answering nothing, until the client gives up (or max)",
    "drop_connection": "close the connection without any response",
    "bad_body": "a 200 with an empty, truncated or invalid-JSON body",
    "first_token_delay": "delay the first token (before or after the response headers)",
    "token_delay": "delay every token by delay ± jitter",
    "stream_stall": "stall streams after after_tokens tokens for stall_for, then go on",
    "stream_cut": "end streams after after_tokens tokens, closing cleanly without [DONE]",
    "stream_reset": "reset (RST) streams after after_tokens tokens",
    "corrupt_chunk": "one chunk of invalid JSON after after_tokens tokens",
    "stream_error_event": "an error event mid-stream on the HTTP 200, after after_tokens tokens",
    "drop_usage": "drop the chunk that carries usage",
    "drop_done": "drop data: [DONE] but close cleanly",
    "duplicate_chunk": "send a chunk twice after after_tokens tokens",
    "reorder_chunks": "swap two chunks after after_tokens tokens",
    "replace_text": "replace the answer's text",
    "garble_text": "garble the answer's text, keeping its shape",
    "enlarge_text": "enlarge the answer's text by factor",
    "break_json": "break the JSON of a structured answer (content or tool-call arguments)",
    "slow_upload": "forward request bodies to the upstream at rate bytes/s",
    "delay_request": "hold requests for delay before forwarding them (a client's retry may overtake)",
}
RULE_KEYS = ("probability", "seed", "occurrences", "count", "match")  # in the order the proxy's rule has them


@dataclass(slots=True, frozen=True, kw_only=True)
class RuleParams(LinkParams):
    """Which requests a rule acts on: the settings every LLM fault takes (None: the proxy's default)."""

    probability: float | None = setting(PERCENT, None)
    seed: int | None = setting(integer(0, 2**63 - 1), None)
    count: int | None = setting(integer(1, 1_000_000_000), None)
    occurrences: list[int] | None = setting({"type": "array", "items": integer(1, 1_000_000_000), "minItems": 1,
                                             "maxItems": 1000}, None)
    match: dict | None = setting(obj({"method": {"type": "string", "maxLength": 16},
                                      "path": {"type": "string", "pattern": "^/"}, "model": {"type": "string"},
                                      "stream": BOOL}, description="which requests (all by default)"), None)


class LLMFault(LinkFault):
    family = "llm"
    effect = "status"

    def __init__(self, spec, target):
        super().__init__(spec, target)
        p = spec.params
        self.params = {param: v for key, (param, _) in LLM_FAULTS[self.type][1].items()
                       if (v := getattr(p, key)) is not None}
        # The proxy takes names of [A-Za-z0-9_.-] (a default name such as stream_stall#0 has a '#'); records are
        # labelled with this one.
        self.rule_name = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name).lstrip("_.-")[:64] or f"fault{spec.index}"
        self.rule = {"name": self.rule_name, "effect": self.effect, "params": self.params}
        self.rule.update({key: v for key in RULE_KEYS if (v := getattr(p, key)) is not None})
        self.proxies: list[str] = []  # admin URLs of the link's LLM proxies
        self.accepted: list[str] = []

    def plan(self, ctx: FaultContext) -> dict:
        self.proxies = [h.l7.url for h in self.link_hops() if h.l7 is not None]
        if not self.proxies:
            raise FaultError(f"fault {self.spec.name}: the link {self.link!r} has no LLM proxy")
        return {"link": self.link, "proxies": self.proxies, "rule": self.rule}

    @property
    def _token(self) -> str:
        return self.target.fault_token

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        self.accepted, refused = post_each(self.proxies, "/__chaos/faults", self.rule, self._token)
        if refused:
            self.apply_error = "refused by " + "; ".join(f"{url}: {why}" for url, why in refused.items())
        if not self.accepted:
            self.applied = False
            raise FaultError(f"fault {self.spec.name}: no LLM proxy took the rule ({self.apply_error})")

    def revert(self, ctx: FaultContext) -> None:
        self.reverted = True
        for url in self.proxies:
            why = call("DELETE", f"{url}/__chaos/faults/{self.rule_name}", token=self._token)
            if why is not None and "404" not in why:
                self.revert_error = f"{url}: {why}"

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        extra = ", ".join(f"{k} {json.dumps(self.rule[k])}" for k in RULE_KEYS if k in self.rule)
        dur = "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"
        what = f"{self.type} ({'; '.join(x for x in (params, extra) if x)})" if params or extra else self.type
        return f"{what} on link {self.link} at {self.spec.at:g}s{dur}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        return "rules end with the LLM proxy, which recover stops"


def _llm_fault(name: str, effect: str, table: dict) -> type[Fault]:
    cls_name = "".join(w.title() for w in name.split("_"))
    settings = {k: link_setting(kind) for k, (_, kind) in table.items()}
    params = params_from_table(cls_name + "Params", RuleParams, settings, REQUIRED.get(name, []))
    return type(cls_name + "Fault", (LLMFault,), {"type": name, "effect": effect, "summary": SUMMARIES[name],
                                                  "Params": params, "schema": params.schema(SUMMARIES[name])})


LLM_FAULT_TYPES: list[type[Fault]] = [_llm_fault(name, effect, table) for name, (effect, table) in LLM_FAULTS.items()]
