"""The per-step table (chaos.records.summary) from Columns: the same StepSummary, field for field, without a record
as a Python object. summary.summarize_steps comes here when it is given Columns.

Past chaos.records.columns.GAP_CAP gaps the ITL percentiles come from the gaps' histograms (within
gaphist.RELATIVE_ERROR of the exact ones); every other figure is exact.
"""

from __future__ import annotations

import numpy as np

from . import gaphist
from .columns import Columns
from .labels import rule_and_effect, split_labels
from .record import ERROR_OUTCOMES
from .stepsummary import StepSummary, lag_and_error_rate, triple


def summarize_steps(c: Columns, step_order: list[str], open_loop: bool = False,
                    durations: dict | None = None) -> list[StepSummary]:
    """summary.summarize_steps on Columns: a step per distinct `step` (none: "all"), in step_order, then the
    others in the order they first appear."""
    codes, first = np.unique(c.step, return_index=True)
    names: dict[str, list[int]] = {}
    for k in np.argsort(first):
        names.setdefault(c.tables["step"][codes[k]] or "all", []).append(int(codes[k]))
    order = [n for n in step_order if n in names] + [n for n in names if n not in step_order]
    return [summarize(c, np.isin(c.step, names[n]), n, open_loop, (durations or {}).get(n)) for n in order]


def summarize(c: Columns, rows: np.ndarray, step: str, open_loop: bool = False,
              duration_s: float | None = None) -> StepSummary:
    """summary.summarize of the records in `rows` (a bool mask)."""
    s = StepSummary(step=step, open_loop=open_loop)
    idx = np.flatnonzero(rows)
    s.requests = len(idx)
    if not s.requests:
        return s
    outcome = c.outcome[idx]
    cancelled = outcome == c.code("outcome", "cancelled")
    failed = np.isin(outcome, c.codes("outcome", ERROR_OUTCOMES))
    ok = idx[~cancelled & ~failed]
    s.cancelled, s.ok = int(cancelled.sum()), len(ok)
    s.errors = _first_counts(c, outcome[failed])
    _faults(s, c, idx, outcome)
    _retry_causes(s, c, idx)
    for name in ("input_tokens", "output_tokens", "ended_early", "fixed_output", "input_mismatch"):
        setattr(s, name, int(getattr(c, name)[ok].sum()))
    s.itl_gaps_dropped = int(c.itl_dropped[ok].sum())
    base = (c.t_sched if open_loop else c.t_start)[ok]  # open loop: count the generator's own delay
    first, end, out = c.t_first[ok], c.t_end[ok], c.output_tokens[ok]
    has_first, has_end = ~np.isnan(first), ~np.isnan(end)
    tpot = has_first & has_end & (out > 1)
    lag_and_error_rate(s, c.t_start[idx] - c.t_sched[idx])
    s.ttft = triple(first[has_first] - base[has_first])
    s.tpot = triple((end[tpot] - first[tpot]) / (out[tpot] - 1))
    s.e2e = triple(end[has_end] - base[has_end])
    gaps = c.itl(rows)
    if isinstance(gaps, gaphist.GapHistogram):
        s.itl_gaps = gaps.n
        s.itl = ({f"p{q}": gaps.interpolated(q) / 1e6 for q in (50, 95, 99)} if gaps.n
                 else {"p50": None, "p95": None, "p99": None})
    else:
        s.itl_gaps = len(gaps)
        s.itl = triple(gaps, 1e6, scratch=True)  # a fresh array: partitioned in place
    del gaps
    if s.e2e["p50"]:
        s.jitter = s.e2e["p99"] / s.e2e["p50"]
    if duration_s is None:
        ends = c.t_end[idx]
        ends = np.where(np.isnan(ends) | (ends == 0), c.t_start[idx], ends)  # summary's `t_end or t_start`
        duration_s = float(ends.max()) - float(c.t_sched[idx].min())
    s.duration_s = max(duration_s, 1e-9)
    s.rps = s.ok / s.duration_s
    s.output_tps = s.output_tokens / s.duration_s
    sources = np.unique(c.input_tokens_source[idx])
    s.token_counts = c.tables["input_tokens_source"][sources[0]] if len(sources) == 1 else "mixed"
    return s


def _first_counts(c: Columns, outcome: np.ndarray) -> dict[str, int]:
    """Outcome -> count, in the order each outcome first appears (a dict filled record by record)."""
    codes, first, counts = np.unique(outcome, return_index=True, return_counts=True)
    return {c.tables["outcome"][codes[k]]: int(counts[k]) for k in np.argsort(first)}


def _faults(s: StepSummary, c: Columns, idx: np.ndarray, outcome: np.ndarray) -> None:
    """Per "rule; effect" label: requests, ok, cancelled and errors by outcome; a label's codes are the fault
    strings that hold it, labels in the order a record first showed each."""
    fault = c.fault[idx]
    codes, first = np.unique(fault, return_index=True)
    holders: dict[str, list[int]] = {}
    for k in np.argsort(first):
        for label in dict.fromkeys(rule_and_effect(x) for x in split_labels(c.tables["fault"][codes[k]])):
            holders.setdefault(label, []).append(int(codes[k]))
    ok_code, cancelled_code = c.code("outcome", "ok"), c.code("outcome", "cancelled")
    failed = np.isin(outcome, c.codes("outcome", ERROR_OUTCOMES))
    for label, held in holders.items():
        mine = np.isin(fault, held)
        o = outcome[mine]
        s.faults[label] = {"requests": int(mine.sum()), "ok": int((o == ok_code).sum()),
                           "cancelled": int((o == cancelled_code).sum()),
                           "errors": _first_counts(c, outcome[mine & failed])}


def _retry_causes(s: StepSummary, c: Columns, idx: np.ndarray) -> None:
    codes, first, counts = np.unique(c.retry_causes[idx], return_index=True, return_counts=True)
    for k in np.argsort(first):
        for cause in c.tables["retry_causes"][codes[k]]:
            s.retry_causes[cause] = s.retry_causes.get(cause, 0) + int(counts[k])
