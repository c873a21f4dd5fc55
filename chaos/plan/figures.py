"""The figures of one load level (a step of the gradient, one probe or several at the same load) with their
intervals: what the sweep's table, the capacity search and the comparison all print.

Latency counts from the intended send time in open loop (coordinated omission cannot hide queueing), as the load's
own summary does; the per-step summary (chaos.records.summary) gives the counts and throughput, chaos.verify.stats
the intervals.
"""

from __future__ import annotations

import numpy as np

from ..records import ERROR_OUTCOMES
from ..records.summary import summarize
from ..verify.stats import Estimate, percentiles, proportion, rate, ratio_of_percentiles, sorted_percentiles
from .slo import SLO, Clause, combine

QS = (50, 95, 99)
# A failed request did not answer within any limit: for an SLO's latency clause it counts as slower than the
# limit (a 429 in 2 ms must not make an overloaded target look fast). A finite stand-in keeps numpy's
# interpolation defined; figures at or beyond it read as "failed".
FAILED_S = 1e9


def latencies(records, metric: str, open_loop: bool) -> list[float]:
    """The ok requests' TTFT or E2E, seconds."""
    out = []
    for r in records:
        if r.outcome != "ok":
            continue
        base = r.t_sched if open_loop else r.t_start
        t = r.t_first if metric == "ttft" else r.t_end
        if t is not None:
            out.append(t - base)
    return out


def level_figures(records, open_loop: bool = False, duration_s: float | None = None) -> dict:
    """The seed's figures for one level, as plain dicts (JSON-ready): counts, P50/P95/P99 of TTFT and E2E with
    order-statistic intervals, the error rate (Wilson) split by class, jitter P99/P50 (bootstrap), ok req/s
    (Poisson) and output tokens/s."""
    s = summarize(list(records), "level", open_loop, duration_s)
    judged = s.requests - s.cancelled
    failed = sum(s.errors.values())
    e2e = latencies(records, "e2e", open_loop)
    return {
        "requests": s.requests, "ok": s.ok, "failed": failed, "cancelled": s.cancelled,
        "errors_by_class": dict(sorted(s.errors.items())),
        "ttft": {k: e.to_dict() for k, e in percentiles(latencies(records, "ttft", open_loop), QS).items()},
        "e2e": {k: e.to_dict() for k, e in percentiles(e2e, QS).items()},
        "error_rate": proportion(failed, judged).to_dict(),
        "jitter": ratio_of_percentiles(e2e, 99, 50).to_dict(),
        "rps": rate(s.ok, s.duration_s).to_dict(),
        "output_tps": s.output_tps, "duration_s": s.duration_s,
        "input_tokens": s.input_tokens, "output_tokens": s.output_tokens,
    }


def slo_estimate(records, clause: Clause, open_loop: bool = False, confidence: float = 0.95) -> Estimate:
    """The clause's figure with its interval. Latency: the percentile over every judged request, a failed one
    counted as FAILED_S (slower than any limit); errors: the Wilson interval of the failed share."""
    judged = [r for r in records if r.outcome != "cancelled"]
    failed = sum(r.outcome in ERROR_OUTCOMES for r in judged)
    if clause.metric == "errors":
        return proportion(failed, len(judged), confidence)
    values = np.sort(np.asarray(latencies(judged, clause.metric, open_loop) + [FAILED_S] * failed, dtype=float))
    if not values.size:
        return Estimate(None, n=0, method="order-statistic")
    return sorted_percentiles(values, (clause.q,), confidence)[f"p{clause.q:g}"]


def judge(records, slo: SLO, open_loop: bool = False, confidence: float = 0.95) -> dict:
    """Every clause's estimate and verdict, and the SLO's: {"verdict", "clauses": [{clause, estimate, verdict}]}."""
    out = []
    for c in slo.clauses:
        e = slo_estimate(records, c, open_loop, confidence)
        out.append({"clause": c.text(), "key": c.key, "limit": c.limit, "estimate": _json_safe(e.to_dict()),
                    "verdict": c.judge(e.low, e.high)})
    return {"verdict": combine([x["verdict"] for x in out]), "clauses": out}


def _json_safe(d: dict) -> dict:
    """FAILED_S read as None with failed=True: JSON has no infinity and the stand-in is not a latency."""
    out = dict(d)
    for k in ("value", "low", "high"):
        if out.get(k) is not None and out[k] >= FAILED_S / 10:
            out[k] = None
            out[f"{k}_failed"] = True
    return out
