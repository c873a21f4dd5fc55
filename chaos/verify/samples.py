"""What a comparison of runs draws from their records, for the gate and `chaos report --compare` alike: each ok
request's latency with the window of start time it belongs to, and the failed and judged counts.

Why windows: requests in flight together share the host's hiccups, so their latencies are not independent draws;
the comparisons resample whole BLOCK_S windows of them (docs/statistics.md)."""

from __future__ import annotations

import numpy as np

from ..records import ERROR_OUTCOMES

BLOCK_S = 0.5
METRICS = ("E2E", "TTFT")
_RUN_STRIDE = 1_000_000  # window labels of different runs never meet: a run holds far fewer windows than this


def latency(metric: str, open_loop: bool = False):
    """A record's `metric` ("E2E" or "TTFT") in seconds, or None when it never got there. An open-loop load counts
    from when the request was due, so the generator's own delay is part of it (as the run's own report does)."""
    end = {"E2E": "t_end", "TTFT": "t_first"}[metric]
    base = "t_sched" if open_loop else "t_start"

    def get(r):
        t = getattr(r, end)
        return None if t is None else t - getattr(r, base)
    return get


def is_open_loop(report: dict) -> bool:
    """Whether a run's load was open loop (an arrival rate), as its report.json says."""
    return any(s.get("open_loop") for s in (report or {}).get("steps") or [])


def windowed(runs: list[tuple[int, list]], get) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ok requests' latencies of (run label, records) pairs pooled, each with its window label (its run and
    its BLOCK_S window of start time, counted from the run's first ok request) and its run label."""
    vals, windows, run = [], [], []
    for i, recs in runs:
        ok = [(v, r.t_start) for r in recs if r.outcome == "ok" and (v := get(r)) is not None]
        if not ok:
            continue
        t0 = min(t for _, t in ok)
        vals += [v for v, _ in ok]
        windows += [i * _RUN_STRIDE + int((t - t0) // BLOCK_S) for _, t in ok]
        run += [i] * len(ok)
    return np.asarray(vals, float), np.asarray(windows, int), np.asarray(run, int)


def errors(records) -> tuple[int, int]:
    """(failed, judged): requests that ended in an error, of those not cancelled by the load's own stop."""
    judged = [r for r in records if r.outcome != "cancelled"]
    return sum(r.outcome in ERROR_OUTCOMES for r in judged), len(judged)
