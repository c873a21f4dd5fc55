"""Each check takes the run's records and times and returns a Check with its measured value.

Latency is judged on percentiles (P50/P95/P99), never on the mean. A check has three outcomes: passed, failed,
or not judged (passed is None): the run could not tell, because of its own timing (an instance came back too
close to the end of the load to be routed requests, too few requests sent in a window), never because of the
target: requests sent and left unanswered when the load ended are the target's failure, not "not judged".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..records import ERROR_OUTCOMES, RequestRecord
from . import stats


@dataclass(slots=True)
class Check:
    name: str
    passed: bool | None  # None: not judged (detail says why)
    measured: str
    threshold: str
    detail: str = ""

    @property
    def status(self) -> str:
        return {True: "passed", False: "failed", None: "not_judged"}[self.passed]

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def not_judged(name: str, measured: str, threshold: str, why: str) -> Check:
    return Check(name, None, measured, threshold, f"not judged: {why}")


def verdict_of(checks: list[Check]) -> str:
    """failed if any check failed; else not_judged if any could not be judged; else passed."""
    if any(c.passed is False for c in checks):
        return "failed"
    return "not_judged" if any(c.passed is None for c in checks) else "passed"


def _judged(records):
    return [r for r in records if r.outcome != "cancelled"]


def error_rate(records: list[RequestRecord]) -> float | None:
    j = _judged(records)
    if not j:
        return None
    return sum(1 for r in j if r.outcome in ERROR_OUTCOMES) / len(j)


def latency(records: list[RequestRecord], q: float, ttft: bool = False) -> float | None:
    vals = []
    for r in records:
        if r.outcome != "ok":
            continue
        end = r.t_first if ttft else r.t_end
        if end is not None:
            vals.append(end - r.t_start)
    return float(np.percentile(vals, q)) if vals else None


def window(records, start: float, end: float) -> list[RequestRecord]:
    """Requests sent in [start, end)."""
    return [r for r in records if start <= r.t_start < end]


def overlapping(records, start: float, end: float) -> list[RequestRecord]:
    """Requests in flight at any moment of [start, end]: the ones a fault could touch."""
    return [r for r in records if r.t_start <= end and (r.t_end or r.t_start) >= start]


def fmt_s(v) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s" if v < 10 else f"{v:.1f} s"


def fmt_pct(v) -> str:
    return "-" if v is None else f"{v * 100:.2f}%"


SLO_FIELDS = {"p50_latency": (50, False), "p95_latency": (95, False), "p99_latency": (99, False),
              "ttft_p95": (95, True), "ttft_p99": (99, True)}


def slo_checks(prefix: str, records: list[RequestRecord], slo, min_requests: int = 1,
               judge_few: bool = False) -> list[Check]:
    """The SLO over records (requests sent in some window). Not judged when the load sent too few, or when a
    percentile rests on fewer answers than make it more than "the largest one" (P95: 20, P99: 100): it says how
    many it needs (judge_few: judge on the point value anyway, saying so — the steady-state gate, which must
    decide). Sent but not answered before the load ended (cancelled) is the target's: a replica hung at the end
    fails."""
    out = []
    n = len(_judged(records))
    if n < min_requests:
        if len(records) < min_requests:
            # The load sent too little for a percentile to mean anything: say so, do not blame the target.
            return [not_judged(f"{prefix}", f"{len(records)} requests sent", f">= {min_requests} requests",
                               "too few requests sent in the window")]
        return [Check(f"{prefix}", False, f"{n} of {len(records)} requests answered",
                      f">= {min_requests} requests answered",
                      f"{len(records) - n} requests sent in the window were still unanswered when the load "
                      f"ended: the target did not answer")]
    for name, (q, ttft) in SLO_FIELDS.items():
        bound = getattr(slo, name)
        if bound is None:
            continue
        e = stats.percentile(_latencies(records, ttft), q)
        need = stats.min_point_samples(q)
        if e.n < need and judge_few:
            out.append(Check(f"{prefix} {name}", e.value is not None and e.value <= bound, fmt_s(e.value),
                             f"<= {fmt_s(bound)}", f"over {e.n} answers, fewer than the {need} a P{q} needs"))
        elif e.n < need:
            out.append(not_judged(f"{prefix} {name}", f"{e.n} answers", f"<= {fmt_s(bound)}",
                                  f"a P{q} needs at least {need} answers (has {e.n}); lengthen the window or the "
                                  f"load"))
        else:
            out.append(Check(f"{prefix} {name}", e.value <= bound, fmt_s(e.value), f"<= {fmt_s(bound)}",
                             f"over {e.n} answers; {_interval(e)}"))
    if slo.error_rate is not None:
        k = sum(1 for r in _judged(records) if r.outcome in ERROR_OUTCOMES)
        e = stats.proportion(k, n)
        out.append(Check(f"{prefix} error_rate", e.value is not None and e.value <= slo.error_rate,
                         fmt_pct(e.value), f"<= {fmt_pct(slo.error_rate)}",
                         f"{k} of {n} requests; {_interval(e, fmt_pct)}"))
    return out


def _latencies(records, ttft: bool) -> list[float]:
    out = []
    for r in records:
        end = r.t_first if ttft else r.t_end
        if r.outcome == "ok" and end is not None:
            out.append(end - r.t_start)
    return out


def _interval(e, fmt=None) -> str:
    fmt = fmt or fmt_s
    if e.low is None or e.high is None:
        return f"interval needs n>={e.needs}" if e.needs else "no interval"
    return f"{e.confidence:.0%} interval {fmt(e.low)}-{fmt(e.high)}"
