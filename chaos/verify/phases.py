"""The run cut into phases (the steady state, each fault's window, after recovery), each with its figures and
their intervals: TTFT, ITL and E2E P50/P95/P99, error rate, throughput and jitter.

A request belongs to the phase it ended in: what clients saw in that span. One in flight when a fault began
counts in the fault's window, where it failed or slowed (a request that never ended counts where it was sent). Percentiles carry distribution-free order-statistic intervals, the
error rate a Wilson interval, throughput an exact Poisson one, jitter (E2E P99/P50) a bootstrap one
(chaos.verify.stats). A figure whose phase holds too few samples says how many it needs instead of a number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import ERROR_OUTCOMES
from . import stats

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


def figures(records, phase: Phase, open_loop: bool = False, confidence: float = 0.95) -> dict:
    """One phase's figures (report.json "phases" entry)."""
    sent = [r for r in records if phase.start <= (r.t_end if r.t_end is not None else r.t_start) < phase.end]
    judged = [r for r in sent if r.outcome != "cancelled"]
    ok = [r for r in judged if r.outcome not in ERROR_OUTCOMES]
    failed = len(judged) - len(ok)
    base = (lambda r: r.t_sched) if open_loop else (lambda r: r.t_start)
    ttft = np.fromiter((r.t_first - base(r) for r in ok if r.t_first is not None), float)
    e2e = np.fromiter((r.t_end - base(r) for r in ok if r.t_end is not None), float)
    gaps = [r.itl_us for r in ok if len(r.itl_us)]
    itl = np.concatenate([np.asarray(g, float) for g in gaps]) / 1e6 if gaps else np.empty(0)
    span = max(phase.end - phase.start, 1e-9)
    by_class: dict[str, int] = {}
    for r in judged:
        if r.outcome in ERROR_OUTCOMES:
            by_class[r.outcome] = by_class.get(r.outcome, 0) + 1
    return {
        "name": phase.name, "kind": phase.kind, "start": phase.start, "end": phase.end,
        "duration_s": round(span, 3), "requests": len(sent), "ok": len(ok), "failed": failed, "errors": by_class,
        "ttft": _triple(ttft, confidence), "itl": _triple(itl, confidence), "e2e": _triple(e2e, confidence),
        "error_rate": stats.proportion(failed, len(judged), confidence).to_dict(),
        "throughput": stats.rate(len(ok), span, confidence).to_dict(),
        "jitter": stats.ratio_of_percentiles(e2e, 99, 50, confidence).to_dict(),
    }


def _triple(values: np.ndarray, confidence: float) -> dict:
    return {k: e.to_dict() for k, e in stats.percentiles(values, QS, confidence).items()}


def phase_table(records, phases: list[Phase], open_loop: bool = False, confidence: float = 0.95) -> list[dict]:
    return [figures(records, p, open_loop, confidence) for p in phases]
