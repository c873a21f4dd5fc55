"""The conventions every paired figure follows (pairs.py's and the figure files it calls, tails.py and rare.py): a
figure's dict, the names a pair's runs share, and which failures a slow host alone can cause. Here, below them
all, so that pairs.py calls the figure files without a circle."""

from __future__ import annotations

TIMING_STATUSES = (408, 504)


def figure(exp: str, phase: str, metric: str, kind: str, **kw) -> dict:
    return {"figure": f"{exp} · {phase} {metric}", "kind": kind, "experiment": exp, "phase": phase,
            "metric": metric, "paired": True, **kw}


def run_phases(run) -> list[str]:
    names = [p["name"] for p in run.report.get("phases") or []]
    return [n for n in names if n != "whole run"] or names


def shared(pairs, key) -> list[str]:
    """Names (phases or faults) in the first run's order that at least one pair has in both runs."""
    seen = []
    for p in pairs:
        for n in key(p.a):
            if n not in seen and n in key(p.b):
                seen.append(n)
    return seen


def shared_phases(pairs) -> list[str]:
    return shared(pairs, run_phases)


def slow_host_failure(r) -> bool:
    """A failure a slow host alone can cause: the client's timeout, or a server's 408 / 504."""
    return r.outcome == "timeout" or (r.outcome == "http_error" and r.status in TIMING_STATUSES)
