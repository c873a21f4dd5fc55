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


def ended_in(records, start: float, end: float) -> list[RequestRecord]:
    """Requests that ended in [start, end): how the service looked from outside in that span."""
    return [r for r in records if r.t_end is not None and start <= r.t_end < end]


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


def slo_checks(prefix: str, records: list[RequestRecord], slo, min_requests: int = 1) -> list[Check]:
    """The SLO over records (requests sent in some window). Not judged only when the load sent too few; sent
    but not answered before the load ended (cancelled) is the target's: a replica hung at the end fails."""
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
        v = latency(records, q, ttft)
        out.append(Check(f"{prefix} {name}", v is not None and v <= bound, fmt_s(v), f"<= {fmt_s(bound)}",
                         f"over {n} requests"))
    if slo.error_rate is not None:
        v = error_rate(records)
        out.append(Check(f"{prefix} error_rate", v is not None and v <= slo.error_rate, fmt_pct(v),
                         f"<= {fmt_pct(slo.error_rate)}", f"over {n} requests"))
    return out


def slo_met(records, slo) -> bool:
    return all(c.passed is True for c in slo_checks("x", records, slo))


def recovery_point(records, fault_start: float, end: float, slo, width: float = 5.0, step: float = 0.5,
                   not_before: float | None = None) -> float | None:
    """Start of the first window (width s, sliding by step) after fault_start whose requests meet the SLO
    (error rate and latency); None if no window does before the run ends."""
    t = max(fault_start, not_before or fault_start)
    while t + width <= end + 1e-9:
        w = ended_in(records, t, t + width)
        if len(_judged(w)) >= 2 and slo_met(w, slo):
            return t
        t += step
    return None
