"""A load plan kept within the limits a vendor target file states (`limits:` of an openai target; the limits
themselves: chaos.targets.limits).

A vendor bills and throttles per key: a chaos run must not be the reason the key is blocked. So the load is
capped, never refused, where a cap can be exact (users, arrival rate, max_tokens), and each cap is named in the
summary's notes; it is refused where no cap can hold (a timed replay keeps the log's own timing, and logged
bodies carry their own max_tokens).

How the rate holds with closed-loop users: each user pauses (think time) long enough that no 60-second window
can hold more than its share of requests_per_minute, counting the retries each request may make. Open-loop
arrivals are capped and sent evenly spaced (Poisson bursts could break a per-minute limit).
"""

from __future__ import annotations

import dataclasses
import json

from ..targets.limits import Limits
from .errors import LoadError

__all__ = ["Limits", "apply_limits", "request_tokens"]


# think time over the least pause that keeps a user's share: no 60 s window can then hold one request more
PACE_MARGIN = 1.01


def request_tokens(specs: list) -> int:
    """The most tokens one request of the workload can take: its largest prompt and its largest max_tokens
    (the prompt as the load counts it: exact on the reference server, estimated elsewhere)."""
    from . import stability

    most = 0
    for spec, _ in specs:
        if spec.name == "stability":
            o = stability.options(spec.extra)
            prompt = max(len(json.dumps(stability.probe(i, o)[1]["messages"]).encode())
                         for i in range(o["prompts"]))  # bytes: at least the tokens of any tokenizer
            most = max(most, prompt + o["max_tokens"])
        else:
            most = max(most, max(spec.input_tokens) + max(spec.output_tokens))
    return most


def _cap_output(specs: list, cap: int, notes: list[str]) -> list:
    out = []
    for spec, w in specs:
        if spec.name == "stability" and spec.extra.get("max_tokens", 64) > cap:
            spec = dataclasses.replace(spec, extra={**spec.extra, "max_tokens": cap})
            notes.append(f"limits: the stability probes' max_tokens capped at {cap}")
        elif spec.name != "stability" and max(spec.output_tokens) > cap:
            lo, hi = spec.output_tokens
            spec = dataclasses.replace(spec, output_tokens=f"{min(lo, cap)}-{cap}")
            notes.append(f"limits: {spec.name} output_tokens {lo}-{hi} capped at {cap} (max_output_tokens)")
        out.append((spec, w))
    return out


def apply_limits(cfg, limits: Limits) -> list[str]:
    """Keep cfg (a chaos.load.driver.LoadConfig) within limits, in place; returns a note per cap. LoadError
    where the plan cannot be held to them."""
    notes: list[str] = []
    plan = cfg.plan
    rated = limits.requests_per_minute or limits.tokens_per_minute
    replaying = any(s.name == "replay" for s, _ in cfg.workload)
    if plan.replay_speed and (rated or limits.max_concurrency):
        raise LoadError(f"a timed replay (--replay-speed) keeps the log's own timing and cannot be held to the "
                        f"target's limits ({limits.describe()}); replay with --users or --rate instead")
    if replaying and (limits.max_output_tokens or limits.tokens_per_minute):
        raise LoadError(f"logged requests carry their own max_tokens, which the load does not rewrite, so a "
                        f"replay cannot be held to the target's limits ({limits.describe()}); use a generated "
                        f"workload against this target")
    if rated and "auto" in (cfg.timeouts.first_token, cfg.timeouts.total):
        raise LoadError("auto timeouts calibrate with requests of their own, outside the target's rate limits; "
                        "give fixed timeouts (e.g. --timeout-first-token 30s)")
    if limits.max_output_tokens:
        cfg.workload = _cap_output(cfg.workload, limits.max_output_tokens, notes)

    per_minute = limits.requests_per_minute
    if limits.tokens_per_minute:
        each = request_tokens(cfg.workload)
        by_tokens = limits.tokens_per_minute // max(1, each)
        if by_tokens < 1:
            raise LoadError(f"one request may take {each:,} tokens, more than the target's "
                            f"{limits.tokens_per_minute:,} tokens/min; lower input_tokens or output_tokens")
        per_minute = by_tokens if per_minute is None else min(per_minute, by_tokens)
        if per_minute == by_tokens:
            notes.append(f"limits: {limits.tokens_per_minute:,} tokens/min at up to {each:,} tokens a request "
                         f"allow {by_tokens:,} requests/min")
    budget = None
    if per_minute:
        budget = per_minute // (1 + cfg.retries)  # every retry is a request the vendor counts
        if budget < 1:
            raise LoadError(f"{per_minute} requests/min cannot carry {cfg.retries} retries a request; lower "
                            f"--retries")
    most_users = max(max(s.users, s.ramp_to or 0) for s in plan.stages)
    cap = min(x for x in (limits.max_concurrency, budget, most_users) if x)
    for s in plan.stages:
        if s.users > cap or (s.ramp_to or 0) > cap:
            notes.append(f"limits: step {s.name}: at most {cap} users (in flight) instead of "
                         f"{max(s.users, s.ramp_to or 0)}")
            s.users = min(s.users, cap)
            s.ramp_to = None if s.ramp_to is None else min(s.ramp_to, cap)
            s.spawn_rate = min(s.spawn_rate, float(cap))
        if budget and s.rate and s.rate > budget / 60:
            notes.append(f"limits: step {s.name}: arrival rate capped at {budget / 60:.3g}/s ({budget}/min)")
            s.rate = budget / 60
    if budget:
        share = budget // cap  # requests a user may start in any 60 s
        pause = 60.0 / share * PACE_MARGIN
        if pause > cfg.think_time:
            cfg.think_time = pause
            notes.append(f"limits: each of up to {cap} users pauses {pause:.2f}s between its requests, so no "
                         f"minute holds more than {budget} requests ({per_minute}/min"
                         f"{f' over {1 + cfg.retries} tries each' if cfg.retries else ''})")
    return notes
