"""Goodput: the share of a span's requests that met the SLO (chaos/verify/goodputspec.py has the bounds), with its
Wilson interval.

The denominator is the error rate's: every request of the span but those the load's own stop cancelled. A failed
request is never good. TTFT and E2E count from when the request was sent, or, in an open-loop run, from when it
was due (as every other latency figure of the report: the generator's own delay is part of what a client saw).
TPOT is (E2E - TTFT) / (output tokens - 1); a request with one output token or none has no time per output token
after the first, so it meets any TPOT bound (vLLM's benchmark_serving counts its TPOT as 0). A bound on a time
the request never reached (no first token, no end) is not met.
"""

from __future__ import annotations

import numpy as np

from ..records.columns import as_columns
from . import stats
from .goodputspec import GoodputSLO


def good(records, rows: np.ndarray, bounds: GoodputSLO, open_loop: bool = False) -> np.ndarray:
    """Which of rows (a boolean mask over records: chaos.records.Columns or a list) met every bound."""
    c = as_columns(records)
    out = np.asarray(rows, bool) & c.ok
    base = c.t_sched if open_loop else c.t_start
    with np.errstate(invalid="ignore", divide="ignore"):  # nan compares False: a time never reached fails
        if bounds.ttft is not None:
            out &= (c.t_first - base) <= bounds.ttft
        if bounds.e2e is not None:
            out &= (c.t_end - base) <= bounds.e2e
        if bounds.tpot is not None:
            n = c.output_tokens
            tpot = np.where(n > 1, (c.t_end - c.t_first) / np.maximum(n - 1, 1), 0.0)
            out &= tpot <= bounds.tpot
    return out


def figure(records, judged: np.ndarray, bounds: GoodputSLO | None, open_loop: bool = False,
           confidence: float = 0.95) -> dict | None:
    """The good share of the judged rows (report.json's phase "goodput"): an Estimate with `good`, the count of
    good requests; None where there are no bounds to judge by."""
    if bounds is None or bounds.is_empty():
        return None
    judged = np.asarray(judged, bool)
    k = int(good(records, judged, bounds, open_loop).sum())
    return {**stats.proportion(k, int(judged.sum()), confidence).to_dict(), "good": k}
