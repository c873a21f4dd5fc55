"""The run cut into phases (the steady state, each fault's window, after recovery), each with its figures and
their intervals: TTFT, ITL and E2E P50/P95/P99, error rate, goodput, throughput and jitter.

A request belongs to the phase it ended in: what clients saw in that span. One in flight when a fault began
counts in the fault's window, where it failed or slowed (a request that never ended counts where it was sent). Percentiles carry distribution-free order-statistic intervals, the
error rate and goodput (chaos.verify.goodput) a Wilson interval, throughput an exact Poisson one, jitter (E2E P99/P50) a bootstrap one
(chaos.verify.stats). A figure whose phase holds too few samples says how many it needs instead of a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import gaphist
from ..records.columns import as_columns
from . import goodput as gp
from . import stats
from .goodputspec import GoodputSLO

QS = (50, 95, 99)


@dataclass(slots=True)
class Phase:
    name: str
    kind: str  # steady | fault | after | run
    start: float
    end: float


def cut(windows, load_start: float, load_end: float, steady_window: float | None,
        recovered_at: float | None) -> list[Phase]:
    """Phases from the fault windows (chaos.verify.recovery.FaultWindow): the steady state is the steady window
    before the first fault (or the whole load when there was none); after recovery runs from the run's failover
    point (or the last revert, when later) to the end of the load."""
    if not windows:
        return [Phase("whole run", "run", load_start, load_end)]
    first = windows[0].start
    steady_from = load_start if steady_window is None else max(load_start, first - steady_window)
    out = [Phase("steady state", "steady", steady_from, first)]
    for w in windows:
        out.append(Phase(w.name, "fault", w.start, w.end if w.end is not None else load_end))
    after = max([w.end if w.end is not None else load_end for w in windows]
                + ([recovered_at] if recovered_at is not None else []))
    if after < load_end:
        out.append(Phase("after recovery", "after", after, load_end))
    return out


def ended_in(records, start: float, end: float) -> list:
    """The records (a list) that belong to [start, end): ended there, or, never ended, were sent there."""
    return [r for r in records if start <= (r.t_end if r.t_end is not None else r.t_start) < end]


def figures(records, phase: Phase, open_loop: bool = False, confidence: float = 0.95,
            goodput: GoodputSLO | None = None) -> dict:
    """One phase's figures (report.json "phases" entry); records: chaos.records.Columns or a list of records.
    goodput: the bounds a good request meets (its figure is None without any)."""
    c = as_columns(records)
    ended = np.where(np.isnan(c.t_end), c.t_start, c.t_end)
    sent = (phase.start <= ended) & (ended < phase.end)
    judged = sent & ~c.cancelled
    failed_rows = judged & c.failed
    ok = judged & ~failed_rows
    n_ok, failed = int(ok.sum()), int(failed_rows.sum())
    base = c.t_sched if open_loop else c.t_start
    ttft = (c.t_first - base)[ok & ~np.isnan(c.t_first)]
    e2e = (c.t_end - base)[ok & ~np.isnan(c.t_end)]
    gaps = c.itl(ok)
    if isinstance(gaps, gaphist.GapHistogram):
        itl = _binned_triple(gaps, confidence)
    else:  # sorted as integers, in place: no float copy of every gap (10M gaps: 80 MB each)
        gaps.sort()
        itl = {k: e.to_dict() for k, e in stats.sorted_percentiles(_Seconds(gaps), QS, confidence).items()}
    span = max(phase.end - phase.start, 1e-9)
    return {
        "name": phase.name, "kind": phase.kind, "start": phase.start, "end": phase.end,
        "duration_s": round(span, 3), "requests": int(sent.sum()), "ok": n_ok, "failed": failed,
        "errors": _by_class(c, failed_rows),
        "ttft": _triple(ttft, confidence), "itl": itl, "e2e": _triple(e2e, confidence),
        "error_rate": stats.proportion(failed, int(judged.sum()), confidence).to_dict(),
        "goodput": gp.figure(c, judged, goodput, open_loop, confidence),
        "throughput": stats.rate(n_ok, span, confidence).to_dict(),
        "jitter": stats.ratio_of_percentiles(e2e, 99, 50, confidence).to_dict(),
    }


def _by_class(c, rows: np.ndarray) -> dict[str, int]:
    """Failed requests by outcome, in the order each outcome first appears."""
    codes, first, counts = np.unique(c.outcome[rows], return_index=True, return_counts=True)
    return {c.tables["outcome"][codes[i]]: int(counts[i]) for i in np.argsort(first)}


class _Seconds:
    """Sorted gaps in µs read as seconds one rank at a time (the few a percentile reads): each the float a
    whole-array division would give, the order the same (dividing by 1e6 keeps it)."""

    __slots__ = ("us", "size")

    def __init__(self, us: np.ndarray):
        self.us, self.size = us, us.size

    def __getitem__(self, i: int) -> float:
        return float(self.us[i]) / 1e6


def _triple(values: np.ndarray, confidence: float) -> dict:
    return {k: e.to_dict() for k, e in stats.percentiles(values, QS, confidence).items()}


def _binned_triple(h: gaphist.GapHistogram, confidence: float) -> dict:
    """ITL percentiles (s) from gaps counted in bins (a run past chaos.records.columns.GAP_CAP gaps): each rank's
    value is known to its bin, so the value is within `relative_error` of the exact one and the interval's bounds
    are the outer edges of the bins of the exact interval's ranks (covering at least what it covers)."""
    out = {}
    for q in QS:
        r = stats._ranks(h.n, q / 100.0, stats._alpha(confidence)) if h.n else None
        value = h.interpolated(q) / 1e6 if h.n else None
        e = (stats.Estimate(value, n=h.n, confidence=confidence, method="order-statistic",
                            needs=stats.min_samples(q, confidence)) if r is None else
             stats.Estimate(value, h.low(r[0]) / 1e6, h.high(r[1]) / 1e6, h.n, confidence, "order-statistic"))
        out[f"p{q}"] = {**e.to_dict(), "relative_error": round(gaphist.RELATIVE_ERROR, 6)}
    return out


def phase_table(records, phases: list[Phase], open_loop: bool = False, confidence: float = 0.95,
                goodput: GoodputSLO | None = None) -> list[dict]:
    c = as_columns(records)  # once for every phase
    return [figures(c, p, open_loop, confidence, goodput) for p in phases]
