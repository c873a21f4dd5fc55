"""What the paired figures outside chaos/gate/pairs.py need of its conventions, without importing it (pairs.py calls
them: an import back would be a cycle): a figure's dict, the phases a pair's runs share, and which failures a slow
host alone can cause. They follow pairs.py's own; a change to one is a change to both."""

from __future__ import annotations

TIMING_STATUSES = (408, 504)


def figure(exp: str, phase: str, metric: str, kind: str, **kw) -> dict:
    return {"figure": f"{exp} · {phase} {metric}", "kind": kind, "experiment": exp, "phase": phase,
            "metric": metric, "paired": True, **kw}


def run_phases(run) -> list[str]:
    names = [p["name"] for p in run.report.get("phases") or []]
    return [n for n in names if n != "whole run"] or names


def shared_phases(pairs) -> list[str]:
    """Phases in the first run's order that at least one pair has in both runs."""
    seen = []
    for p in pairs:
        for n in run_phases(p.a):
            if n not in seen and n in run_phases(p.b):
                seen.append(n)
    return seen


def slow_host_failure(r) -> bool:
    """A failure a slow host alone can cause: the client's timeout, or a server's 408 / 504."""
    return r.outcome == "timeout" or (r.outcome == "http_error" and r.status in TIMING_STATUSES)
