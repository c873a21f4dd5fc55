"""The checks an experiment's verify: section asks for, judged on one finished run.

A check that depends on timing judges only what the run gave it time to see: an instance restarted too close to
the end of the load to be routed requests is "not judged" (the run's timing, not the target, is to blame).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .spec import SLO
from . import checks as V
from .inputs import input_checks
from .recovery import Timeline, failover


@dataclass(slots=True)
class RunFacts:
    """What the runner knew when the load ended, besides the records."""

    gate: tuple | None = None  # (passed, detail) of the steady-state gate; None: no fault was due
    faults: list = field(default_factory=list)
    target: object = None
    final_health: dict | None = None
    load_t0: float | None = None
    up_since: dict = field(default_factory=dict)  # instance id -> when it last passed a health wait (None: down)


def run_checks(exp, records, facts: RunFacts) -> list[V.Check]:
    v, out = exp.verify, []
    end = max((r.t_end or r.t_start for r in records), default=time.time())
    if facts.gate is not None:
        out.append(V.Check("steady state before faults", facts.gate[0], facts.gate[1], "the steady-state SLO"))
        if not facts.gate[0]:
            return out
    applied = [f for f in facts.faults if f.applied]
    f_start = min((f.applied_at for f in applied), default=None)
    f_end = max((getattr(f, "reverted_at", None) or end for f in applied), default=None)
    if v.error_rate_during_fault is not None and f_start is not None:
        bound = v.error_rate_during_fault
        w = V.overlapping(records, f_start, f_end)
        er = V.error_rate(w)
        out.append(V.Check("error rate during the fault", er is not None and er <= bound, V.fmt_pct(er),
                           f"<= {V.fmt_pct(bound)}", f"{len(w)} requests in flight between the first fault "
                                                     f"and the last revert"))
    if v.slo_during_fault is not None and f_start is not None:
        out += V.slo_checks("during the fault", V.overlapping(records, f_start, f_end), v.slo_during_fault)
    slo = exp.steady_slo if not exp.steady_slo.is_empty() else SLO(error_rate=0.0)
    recovered = None
    if f_start is not None:
        width = v.recovery_window
        # A fault on a link (a toxic, a proxy rule) is a condition that lasts until it is reverted: what it
        # hit may end long after it began (a stalled stream ends at its client's timeout), so the service
        # recovers from its revert. An instance fault is an event: the service recovers from the moment it
        # happened (the gateway routes around a killed replica before that replica is back).
        ends = [f.reverted_at for f in applied if getattr(f, "family", None) in ("network", "llm")
                and getattr(f, "reverted_at", None) is not None]
        r_from = max([f_start, *ends])
        # on the records' own clock: the first moment after which the requests ending in a window meet the SLO
        fo = failover(Timeline(records, slo), r_from, width)
        recovered = fo["at"]
        if v.recovery_time is not None:
            bound = v.recovery_time.max
            took = None if recovered is None else max(0.0, recovered - r_from)  # the moment is rounded to 1 µs
            since = "the revert of the last link fault" if ends else "the first fault"
            out.append(V.Check("recovery time", took is not None and took <= bound,
                               "never" if took is None else V.fmt_s(took), f"<= {V.fmt_s(bound)}",
                               f"from {since} until the requests ending in a {width:g}s window "
                               f"meet the steady-state SLO"
                               + (f" (to within {fo['resolution_s'] * 1000:.0f} ms: the records' spacing)"
                                  if fo.get("resolution_s") else "")))
    if v.slo_after is not None:
        after_from = recovered if recovered is not None else (f_end or facts.load_t0 or 0)
        after = [r for r in records if r.t_start >= after_from]
        out += V.slo_checks("after recovery", after, v.slo_after)
    if v.status_codes is not None:
        allowed = set(v.status_codes)
        seen = {}
        for r in records:
            if r.status is not None:
                seen[r.status] = seen.get(r.status, 0) + 1
        bad = {s: n for s, n in seen.items() if s not in allowed}
        out.append(V.Check("status codes", not bad, ", ".join(f"{s}x{n}" for s, n in sorted(seen.items())),
                           f"only {sorted(allowed)}", "unexpected: " + ", ".join(map(str, sorted(bad)))
                           if bad else "connection-level failures are counted in the error rate"))
    if v.served_by_all and facts.target is not None:
        out.append(served_by_all(records, recovered, facts))
    if v.fallback is not None and f_start is not None:
        within = v.fallback.within
        for path in v.fallback.paths:
            hits = [r for r in records if r.outcome == "ok" and r.served_by == path and r.t_start >= f_start]
            first = min((r.t_end for r in hits), default=None)
            took = None if first is None else first - f_start
            out.append(V.Check(f"fallback to {path}", took is not None and took <= within,
                               "never" if took is None else f"after {V.fmt_s(took)}, {len(hits)} responses",
                               f"within {V.fmt_s(within)}", "first answer from that path after the first fault"))
    out += input_checks(facts.faults)
    if v.latency_growth is not None:
        from .growth import growth_check

        out.append(growth_check(records, exp.load.to_dict(), v.latency_growth))
    if v.stability is not None:  # output stability through the faults (docs/stability.md)
        from .stability import fault_phases, stability_checks

        out += stability_checks(records, v.stability, fault_phases(facts.faults, end))[0]
    health = facts.final_health
    if health is not None and exp.steady_health:
        sick = [k for k, ok in health.items() if not ok]
        out.append(V.Check("steady state re-checked: health at the end", not sick,
                           "all healthy" if not sick else "unhealthy: " + ", ".join(sick), "all healthy"))
    if not exp.steady_slo.is_empty() and records:
        tail = V.window(records, end - exp.steady_window, end + 1)
        out += V.slo_checks("steady state re-checked", [r for r in tail if r.t_end is not None],
                            exp.steady_slo, min_requests=3)
    return out


def settle_time(records, target) -> float:
    """How long an instance must have been back before the end of the load for it to be expected to serve: the
    front's routing delay, then two typical (P95) requests, at least 5 s."""
    p95 = V.latency(records, 95) or 1.0
    return max(5.0, target.routing_delay() + 2 * p95)


def served_by_all(records, recovered: float | None, facts: RunFacts) -> V.Check:
    """Each instance must serve (an ok answer it gave) after the service recovered, or, if it never did, after
    the last fault that touched that instance was reverted; and no earlier than it was back up. An instance
    killed for good (kill_instance without restart_after) is left out: it is not meant to serve again."""
    name, want = "every instance serves after recovery", "all instances"
    applied = [f for f in facts.faults if f.applied]
    f_start = min((f.applied_at for f in applied), default=0.0)
    last_send = max((r.t_start for r in records), default=None)  # no request started after this one
    settle = settle_time(records, facts.target)
    served_all, blamed, unjudged, gone = set(), [], [], []
    for inst in facts.target.instances:
        touched = [f for f in applied if f.touches(inst)]
        if any(f.leaves_down() for f in touched):
            gone.append(inst.id)  # killed without restart_after: not meant to serve again, so not asked to
            continue
        since = recovered if recovered is not None else max(
            (getattr(f, "reverted_at", None) or f_start for f in touched), default=f_start)
        up = facts.up_since.get(inst.id)
        if up is not None:
            since = max(since, up)
        if any(r.outcome == "ok" and r.served_by == inst.id and r.t_start >= since for r in records):
            served_all.add(inst.id)
            continue
        failed = next((f.revert_error for f in touched if getattr(f, "revert_error", None)), None)
        if failed:
            blamed.append(f"{inst.id} (its restart failed: {failed})")
        elif up is None or last_send is None:
            unjudged.append(f"{inst.id} was not back before the load ended")
        elif last_send - since < settle:
            left = "after the last request was sent" if last_send <= since else \
                f"only {last_send - since:.1f}s before the last request was sent"
            unjudged.append(f"{inst.id} was back {left} (needs {settle:.1f}s to be routed requests)")
        else:
            blamed.append(f"{inst.id} (back {last_send - since:.1f}s before the load ended, served nothing)")
    measured = ", ".join(sorted(served_all)) or "none"
    left_out = f"; not asked of {', '.join(gone)} (killed without restart_after)" if gone else ""
    if gone:
        want = "all instances meant to come back"
    if blamed:
        return V.Check(name, False, measured, want, "missing: " + "; ".join(blamed + unjudged) + left_out)
    if unjudged:
        return V.not_judged(name, measured, want, "; ".join(unjudged) + "; lengthen load.duration or restart sooner"
                            + left_out)
    if not served_all:
        return V.not_judged(name, measured, want, "every instance was killed without restart_after")
    return V.Check(name, True, measured, want, left_out.removeprefix("; "))
