"""One step's figures (StepSummary) and the two pieces both ways of computing them share: summary.py from records,
colsummary.py from columns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

LAG_THRESHOLD_S = 0.010  # a request sent this much after its intended time means the generator fell behind


@dataclass(slots=True)
class StepSummary:
    step: str
    requests: int = 0  # sent (cancelled included)
    ok: int = 0
    cancelled: int = 0
    errors: dict = field(default_factory=dict)  # outcome -> count
    error_rate: float = 0.0  # errors / (requests - cancelled)
    ttft: dict = field(default_factory=dict)  # p50/p95/p99 seconds
    tpot: dict = field(default_factory=dict)
    itl: dict = field(default_factory=dict)  # pooled over every kept gap of ok requests
    itl_gaps: int = 0  # how many gaps the ITL percentiles pool
    itl_gaps_dropped: int = 0  # gaps of very long outputs that records counted but did not keep
    e2e: dict = field(default_factory=dict)
    jitter: float | None = None  # P99/P50 of E2E
    duration_s: float = 0.0
    rps: float = 0.0  # completed ok requests per second
    output_tps: float = 0.0  # output tokens per second (ok requests)
    input_tokens: int = 0
    output_tokens: int = 0
    ended_early: int = 0  # ok fixed-length requests stopped by the model (finish_reason stop) before max_tokens
    fixed_output: int = 0  # ok requests whose output length the workload fixed (json and replay's are caps)
    input_mismatch: int = 0  # ok requests counted exactly whose usage.prompt_tokens differs from input_tokens
    token_counts: str = "exact"  # exact | estimate | mixed
    late_requests: int = 0  # open loop: sent > 10 ms after their intended time
    max_lag_s: float = 0.0
    lag: dict = field(default_factory=dict)  # t_start - t_sched: p50/p99/max seconds (open loop: the generator's)
    open_loop: bool = False
    # "rule; effect" of the fault proxy -> {"requests", "ok", "cancelled", "errors": {outcome: count}}; a request
    # that met two faults counts under each
    faults: dict = field(default_factory=dict)
    retry_causes: dict = field(default_factory=dict)  # "429" / "503" / "reset" / "timeout:connect" ... -> attempts

    def to_dict(self) -> dict:
        return asdict(self)


def triple(values, scale: float = 1.0, scratch: bool = False) -> dict:
    """P50/P95/P99 in one pass (each np.percentile call converts and partitions the whole input again). scratch:
    values is a temporary array, partitioned in place rather than copied (the pooled gaps of a long run)."""
    if not len(values):
        return {"p50": None, "p95": None, "p99": None}
    qs = np.percentile(values, [50, 95, 99], overwrite_input=scratch)
    return dict(zip(("p50", "p95", "p99"), (float(v) / scale for v in qs)))


def lag_and_error_rate(s: StepSummary, lags: np.ndarray) -> None:
    """The generator's lag (t_start - t_sched of every request sent) and the error rate, from the counts already
    in s: shared by the record path and the columns path (colsummary.py)."""
    s.late_requests = int((lags > LAG_THRESHOLD_S).sum())
    s.max_lag_s = max(0.0, float(lags.max()))
    p50, p99 = np.percentile(lags, [50, 99])
    s.lag = {"p50": float(p50), "p99": float(p99), "max": float(lags.max())}
    judged = s.requests - s.cancelled
    s.error_rate = sum(s.errors.values()) / judged if judged else 0.0
