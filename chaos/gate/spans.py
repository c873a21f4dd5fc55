"""The conventions every paired figure follows (pairs.py's and the figure files it calls, tails.py and rare.py): a
figure's dict, the names a pair's runs share, and which failures a slow host alone can cause. Here, below them
all, so that pairs.py calls the figure files without a circle."""

from __future__ import annotations

import math

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


def without_slow_failures(recs: list, host: str | None, set_aside: dict, pair: int) -> list:
    """A run's records, less the failures a slow host alone can cause where the pair's hosts differed (host: why,
    or None); each pair's count set aside is added up in set_aside, for the figure to say."""
    if not host:
        return recs
    kept = [r for r in recs if not slow_host_failure(r)]
    set_aside[pair] = set_aside.get(pair, 0) + len(recs) - len(kept)
    return kept


def share_changes(pairs, count) -> tuple[list, list, list, tuple[int, int, int, int]]:
    """A share's change pair by pair, from count(pair, run) -> (k, n) of each run: d, the difference of the shares
    (b's less a's), z, that of their logs (log((k + 0.5)/(n + 1)): finite at 0, near normal), the pairs used
    (both runs had n), and the totals (ka, na, kb, nb)."""
    d, z, used, tot = [], [], [], [0, 0, 0, 0]
    for p in pairs:
        (ka, na), (kb, nb) = count(p, p.a), count(p, p.b)
        if na and nb:
            d.append(kb / nb - ka / na)
            z.append(math.log((kb + 0.5) / (nb + 1)) - math.log((ka + 0.5) / (na + 1)))
            used.append(p.number)
            tot = [tot[0] + ka, tot[1] + na, tot[2] + kb, tot[3] + nb]
    return d, z, used, tuple(tot)
