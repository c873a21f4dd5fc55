"""What was seen, mapped to its likely causes, after the seed's troubleshooting table; and client settings advised
from the measurements. Each finding cites the figures it rests on; a rule whose evidence is absent says nothing.

| symptom                                           | likely cause                 |
|---------------------------------------------------|------------------------------|
| latency rising with concurrency, queue growing    | batching / queueing limit    |
| timeouts with KV usage near full, or preemptions  | memory pressure              |
| structured (JSON) outputs failing                 | decoding settings            |
| long inputs failing                               | the context limit            |
| a burst of 5xx in a short span                    | server exceptions            |
| large jitter (P99/P50) at low load                | resource contention          |
"""

from __future__ import annotations

import re

import numpy as np

from ..records.columns import as_columns

KV_FULL = 0.9  # KV usage at or over this (a fraction) counts as "near full"
JITTER_HIGH = 3.0
LOW_LOAD_USERS = 4
BURST_WINDOW_S = 5.0


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def _users(step: dict) -> int | None:
    m = re.search(r"users=(\d+)", step.get("step") or "")
    return int(m.group(1)) if m else None


def _series_max(metrics: dict | None, key: str) -> tuple[float | None, str | None]:
    best, who = None, None
    for inst, points in ((metrics or {}).get("series") or {}).get(key, {}).items():
        for _, v in points:
            if best is None or v > best:
                best, who = v, inst
    return best, who


def queueing(steps: list[dict], metrics: dict | None) -> dict | None:
    stepped = [(u, s) for s in steps if (u := _users(s)) is not None and (s.get("e2e") or {}).get("p95")]
    if len(stepped) < 2:
        return None
    (u0, s0), (u1, s1) = stepped[0], stepped[-1]
    p0, p1 = s0["e2e"]["p95"], s1["e2e"]["p95"]
    if p1 < 1.5 * p0:
        return None
    evidence = [f"E2E P95 {_ms(p0)} at {u0} users -> {_ms(p1)} at {u1} users ({p1 / p0:.1f}x)"]
    waiting, who = _series_max(metrics, "waiting")
    if waiting:
        evidence.append(f"requests waiting in {who}'s queue reached {waiting:g}")
    return {"cause": "batching / queueing limit", "evidence": evidence,
            "advice": "cap concurrency below the knee (see advice), raise the batch size (8-32) or add replicas"}


def memory(records, metrics: dict | None) -> dict | None:
    c = as_columns(records)
    timeouts = int((c.outcome == c.code("outcome", "timeout")).sum())
    kv, kv_who = _series_max(metrics, "kv_usage")
    pre, pre_who = _series_max(metrics, "preemptions_total")
    full = kv is not None and kv >= KV_FULL
    if not (pre and pre > 0) and not (timeouts and full):
        return None
    evidence = []
    if full:
        evidence.append(f"KV cache usage reached {kv * 100:.0f}% on {kv_who}")
    if pre:
        evidence.append(f"{pre:g} preemptions on {pre_who}")
    if timeouts:
        evidence.append(f"{timeouts} requests timed out")
    return {"cause": "memory pressure (KV cache)", "evidence": evidence,
            "advice": "lower max_num_seqs or the context length, raise the KV cache share, or add replicas"}


def decoding(stability: dict | None) -> dict | None:
    j = (stability or {}).get("json_valid") or {}
    rate, n = (j.get("rate") or {}).get("value"), (j.get("rate") or {}).get("n")
    if rate is None or rate >= 1.0:
        return None
    return {"cause": "decoding settings (structured output)",
            "evidence": [f"only {rate * 100:.1f}% of {n} structured answers were valid JSON"],
            "advice": "use guided / JSON-schema decoding, temperature 0, and a max_tokens that fits the object"}


def context(records) -> dict | None:
    c = as_columns(records)
    failed = c.failed
    refused = [i for i, v in enumerate(c.tables["error_code"]) if isinstance(v, str) and v.startswith("context_length")]
    ctx = int((failed & np.isin(c.error_code, refused)).sum())
    sizes = c.input_tokens.astype(float)
    n_failed = int(failed.sum())
    if len(sizes) >= 20 and n_failed:
        top = np.percentile(sizes, 75)
        long_fail = int((failed & (sizes >= top)).sum())
        long_all = int((sizes >= top).sum())
        short_fail, short_all = n_failed - long_fail, len(sizes) - long_all
        skewed = long_all and short_all and long_fail / long_all > 3 * max(short_fail / short_all, 1e-9) \
            and long_fail >= 3
    else:
        skewed = False
    if not ctx and not skewed:
        return None
    evidence = [f"{ctx} requests refused with context_length_exceeded"] if ctx else []
    if skewed:
        evidence.append(f"the longest quarter of inputs (>= {top:.0f} tokens) failed {long_fail} of {long_all}, "
                        f"the rest {short_fail} of {short_all}")
    return {"cause": "the context limit", "evidence": evidence,
            "advice": "truncate or chunk inputs before sending; check max_model_len against the workload"}


def burst(records) -> dict | None:
    c = as_columns(records)
    t = np.sort(c.t_end[(c.outcome == c.code("outcome", "http_error")) & (c.status >= 500) & ~np.isnan(c.t_end)])
    if len(t) < 5:
        return None
    # the densest BURST_WINDOW_S span
    j = np.searchsorted(t, t + BURST_WINDOW_S, side="right")
    i = int(np.argmax(j - np.arange(len(t))))
    n = int(j[i] - i)
    if n < 5 or n < 0.5 * len(t):
        return None
    return {"cause": "server exceptions (an error burst)",
            "evidence": [f"{n} of {len(t)} 5xx answers came within {BURST_WINDOW_S:g} s"],
            "advice": "read the server's log for that span; the journal's timeline shows what happened then"}


def contention(steps: list[dict]) -> dict | None:
    for s in steps:
        u, jitter = _users(s), s.get("jitter")
        if u is not None and u <= LOW_LOAD_USERS and jitter and jitter >= JITTER_HIGH:
            return {"cause": "resource contention", "evidence": [
                f"jitter (E2E P99/P50) {jitter:.1f} at only {u} users ({s['step']})"],
                    "advice": "look for noisy neighbours, CPU throttling, GC pauses or a shared GPU"}
    return None


def diagnose(records, steps: list[dict], metrics: dict | None, stability: dict | None) -> list[dict]:
    """records: a list, or chaos.records.columns.Columns."""
    records = as_columns(records)  # once for every rule
    found = [queueing(steps, metrics), memory(records, metrics), decoding(stability), context(records),
             burst(records), contention(steps)]
    return [f for f in found if f]


def advice(phases: list[dict], steps: list[dict], slo_bound: float | None) -> dict:
    """Client settings from the measurements: timeout about 1.5 x P99 (from the steady state's E2E P99 and its
    interval), at most 2 retries with backoff and a retry budget, and a concurrency cap at measured capacity
    minus 20 %."""
    out = {}
    steady = next((p for p in phases if p["kind"] in ("steady", "run")), None)
    p99 = (steady or {}).get("e2e", {}).get("p99") or {}
    if p99.get("value") is not None:
        scale = lambda v: None if v is None else round(1.5 * v, 4)  # noqa: E731
        out["timeout"] = {**p99, "value": scale(p99["value"]), "low": scale(p99.get("low")),
                          "high": scale(p99.get("high")), "rule": "1.5 x the steady state's E2E P99"}
    er = ((steady or {}).get("error_rate") or {}).get("value")
    out["retries"] = {"max_retries": 2, "backoff": "exponential, with jitter",
                      "retry_budget": "at most 10% extra requests" if not er or er < 0.05 else
                      f"at most {min(50, max(10, round(er * 200)))}% extra requests (steady errors "
                      f"{er * 100:.1f}%)"}
    ok_steps = [(u, s) for s in steps if (u := _users(s)) is not None and (s.get("e2e") or {}).get("p95")
                is not None and (slo_bound is None or s["e2e"]["p95"] <= slo_bound) and s.get("error_rate", 0) < 0.01]
    if len({_users(s) for s in steps if _users(s) is not None}) >= 2 and ok_steps:
        cap_users, step = max(ok_steps, key=lambda x: x[0])
        out["concurrency_cap"] = {"value": max(1, int(cap_users * 0.8)), "capacity": cap_users,
                                  "rule": f"capacity minus 20%: {step['step']} was the highest step meeting the SLO"}
    else:
        out["concurrency_cap"] = {"value": None, "rule": "needs a concurrency gradient (load: steps) to measure "
                                                         "capacity"}
    return out
