"""Recovery as four measured figures, per fault and for the run, on the records' own clock.

The journal is the ground truth for when a fault began and ended and when an instance was back; the records
say what clients saw. Every moment below is a record's own time (or a journal time), never a step of a grid, so a
figure's resolution is the spacing of the records themselves (docs/recovery.md defines each):

- time to detect: from the fault to the first moment a client saw a request fail or breach the SLO because of
  it: a failed request's end, or a slow one's send time plus the latency bound (the moment it became a breach).
- time to failover: from the fault to the first moment T after which the requests that end in (T, T + window]
  meet the steady-state SLO again.
- time to restore capacity: until every faulted instance serves again (its first ok answer after it was back) and
  the ok throughput over a window is back within the steady state's interval.
- error budget spent: failed requests (and the seconds clients spent on them) from the fault to its failover
  point, or to the next fault or the end when it never failed over.

"Never" is a result with its evidence, not an error: the figure's value is None and `evidence` says what the last
window looked like.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..records.columns import as_columns
from .stats import rate
from ..rundir.journal import Event

MAX_CANDIDATES = 20_000  # windows tried per fault: a long run's fault with thousands of bad requests stays fast


@dataclass(slots=True)
class FaultWindow:
    """One fault as the journal tells it."""

    name: str
    type: str
    start: float  # fault_applying: the earliest moment it could act
    end: float | None = None  # fault_reverted (a restart's end: the instance is back); None: never reverted
    instances: list = field(default_factory=list)  # ids of the instances it was applied to
    back_at: dict = field(default_factory=dict)  # instance id -> when it was back up (up_since after the revert)
    link: bool = False  # a fault on the link to `instances[0]`: it is back at the revert
    fronts: set = field(default_factory=set)  # ids of gateways among `instances`: serving is any answer at all


def fault_windows(journal: list[dict]) -> list[FaultWindow]:
    """The faults of a run from its journal events, in the order applied."""
    out: dict[str, FaultWindow] = {}
    for e in journal:
        name = e.get("fault")
        if e.get("event") == Event.FAULT_APPLYING and name:
            plan = e.get("plan") or {}
            ids = [i.get("id") for i in plan.get("instances") or [] if isinstance(i, dict) and i.get("id")]
            link = not ids and plan.get("link") not in (None, "client")  # a link fault on the way to one instance
            out[name] = FaultWindow(name, e.get("type") or "", float(e["t"]), instances=[plan["link"]] if link
                                    else ids, link=link,
                                    fronts={i["id"] for i in plan.get("instances") or []
                                            if isinstance(i, dict) and i.get("front")})
        elif e.get("event") == Event.FAULT_REVERTED and name in out and out[name].end is None:
            w = out[name]
            w.end = float(e["t"])
            for inst in e.get("instances") or []:  # a restart's instance is back when its health check passed
                if w.link:
                    break  # the link is back at the revert; the instance itself never went away
                if isinstance(inst, dict) and inst.get("id") in w.instances and inst.get("up_since"):
                    w.back_at[inst["id"]] = max(float(inst["up_since"]), w.start)
    return sorted(out.values(), key=lambda w: w.start)


class Timeline:
    """The records as sorted columns: what every figure is computed from. records: chaos.records.Columns or a
    list of records; rows[i] is the Columns row of the i-th request by end time."""

    def __init__(self, records, slo):
        c = as_columns(records)
        keep = np.flatnonzero(~c.cancelled & ~np.isnan(c.t_end))
        self.cols = c
        self.rows = keep[np.argsort(c.t_end[keep], kind="stable")]  # stable: ties keep the file's order
        self.start = c.t_start[self.rows]
        self.end = c.t_end[self.rows]
        self.failed = c.failed[self.rows]
        self.ok = ~self.failed
        self.e2e = self.end - self.start
        self.ttft = c.t_first[self.rows] - self.start  # nan where no first token came
        self.slo = slo
        # the strictest per-request latency bound the SLO implies: a request over it is a breach
        bounds = [b for b in (slo.p50_latency, slo.p95_latency, slo.p99_latency) if b is not None]
        self.bound = min(bounds) if bounds else None
        self.ttft_bound = min([b for b in (slo.ttft_p95, slo.ttft_p99) if b is not None], default=None)
        slow = np.zeros(len(self.rows), bool)
        if self.bound is not None:
            slow |= self.ok & (self.e2e > self.bound)
        if self.ttft_bound is not None:
            slow |= self.ok & (np.nan_to_num(self.ttft, nan=0.0) > self.ttft_bound)
        self.slow = slow
        self.t_last = float(self.end[-1]) if len(self.rows) else 0.0

    def record(self, i: int):
        """The i-th request by end time as a whole record (for evidence)."""
        return self.cols.record(int(self.rows[i]))

    def served_by(self, instance: str) -> np.ndarray:
        return self.cols.served_by[self.rows] == self.cols.code("served_by", instance)

    def meets(self, lo: int, hi: int, min_requests: int = 2) -> bool:
        """Do records [lo, hi) (by end time) meet the SLO?"""
        n = hi - lo
        if n < min_requests:
            return False
        slo, failed = self.slo, self.failed[lo:hi]
        if slo.error_rate is not None and failed.sum() / n > slo.error_rate + 1e-12:
            return False
        ok = self.ok[lo:hi]
        for bound, q, values in ((slo.p50_latency, 50, self.e2e), (slo.p95_latency, 95, self.e2e),
                                 (slo.p99_latency, 99, self.e2e), (slo.ttft_p95, 95, self.ttft),
                                 (slo.ttft_p99, 99, self.ttft)):
            if bound is None:
                continue
            v = values[lo:hi][ok]
            v = v[~np.isnan(v)]
            if not len(v) or np.percentile(v, q) > bound:
                return False
        return True

    def describe(self, lo: int, hi: int) -> str:
        n = hi - lo
        if n <= 0:
            return "no request ended in it"
        ok = self.ok[lo:hi]
        p95 = np.percentile(self.e2e[lo:hi][ok], 95) if ok.any() else None
        return (f"{n} requests, {int(self.failed[lo:hi].sum())} failed"
                + (f", E2E P95 {p95 * 1000:.0f} ms" if p95 is not None else ""))


def _figure(value, at, evidence: str, resolution: float | None = None) -> dict:
    out = {"value": None if value is None else round(float(value), 6),
           "at": None if at is None else round(float(at), 6), "evidence": evidence}
    if resolution is not None:
        out["resolution_s"] = round(float(resolution), 6)
    return out


def detect(tl: Timeline, w: FaultWindow, until: float) -> dict:
    """The first failure or SLO breach a client saw after the fault began (and before `until`)."""
    best, why = None, None
    after = tl.end >= w.start
    cand = np.flatnonzero(after & tl.failed & (tl.end < until))
    if len(cand):
        i = cand[np.argmin(tl.end[cand])]
        best, why = tl.end[i], i
    if tl.bound is not None:
        breach_at = tl.start + tl.bound
        slow = np.flatnonzero(tl.slow & (breach_at >= w.start) & (breach_at < until))
        if len(slow):
            i = slow[np.argmin(breach_at[slow])]
            if best is None or breach_at[i] < best:
                best, why = breach_at[i], i
    if best is None:
        return _figure(None, None, "no request failed or breached the SLO after the fault began")
    r = tl.record(why)
    what = (f"{r.outcome}" + (f" {r.status}" if r.status else "") + (f" {r.error_code}" if r.error_code else "")
            if tl.failed[why] else f"E2E {tl.e2e[why] * 1000:.0f} ms over the {tl.bound * 1000:.0f} ms bound")
    return _figure(best - w.start, best, f"request {r.id[:12]} ({what}, served by {r.served_by or '-'}"
                                         + (f", fault {r.fault}" if r.fault else "") + ")")


def failover(tl: Timeline, start: float, width: float, min_requests: int = 2, from_t: float | None = None) -> dict:
    """The first T >= from_t (default: start) such that the requests ending in (T, T + width] meet the SLO, as
    seconds from `start`. Tried at from_t and just after each failed or slow request's end: between two such ends
    a later T only adds bad requests at the window's far side, so those are the only moments a window can first
    come good. from_t is where clients first saw the fault: a good window before that proves nothing."""
    origin = start if from_t is None else max(start, from_t)
    first = int(np.searchsorted(tl.end, origin, side="left"))
    bad = np.flatnonzero(tl.failed[first:] | tl.slow[first:]) + first
    ends, step = thinned(tl.end[bad], MAX_CANDIDATES)
    candidates = np.concatenate(([origin], ends))
    last_desc = "the run ended before a whole window passed"
    for t in candidates:
        if t + width > tl.t_last + 1e-9:
            break
        lo = int(np.searchsorted(tl.end, t, side="right"))
        hi = int(np.searchsorted(tl.end, t + width, side="right"))
        if tl.meets(lo, hi, min_requests):
            gap = max(_spacing(tl, lo), step)
            return _figure(t - start, t, f"requests ending in the {width:g} s after it meet the SLO "
                                         f"({tl.describe(lo, hi)})", gap)
        last_desc = f"the last window tried: {tl.describe(lo, hi)}"
    return _figure(None, None, f"never met the SLO again before the run ended; {last_desc}")


def thinned(times: np.ndarray, cap: int) -> tuple[np.ndarray, float]:
    """At most about cap of the sorted times, the last of each equal slice of their span (a window after it
    holds none of that slice's failures), and the slice's width (0.0 when all are kept): a gateway refusing
    connections while it restarts fails thousands of requests a second, and trying a window after every one of
    them is all the time there is."""
    if len(times) <= cap:
        return times, 0.0
    step = float(times[-1] - times[0]) / cap
    if step <= 0:
        return times[-1:], 0.0
    slices = np.floor((times - times[0]) / step)
    last = np.append(np.flatnonzero(np.diff(slices) != 0), len(times) - 1)
    return times[last], step


def _spacing(tl: Timeline, i: int) -> float:
    """How finely the moment is known: the gap between the record ends either side of it."""
    lo, hi = max(i - 1, 0), min(i, len(tl.end) - 1)
    return float(tl.end[hi] - tl.end[lo]) if hi > lo else 0.0


def steady_rate(tl: Timeline, start: float, end: float, confidence: float = 0.95):
    """Ok answers per second in [start, end), with its Poisson interval."""
    lo, hi = np.searchsorted(tl.end, [start, end])
    return rate(int(tl.ok[lo:hi].sum()), max(end - start, 1e-9), confidence)


def restore(tl: Timeline, w: FaultWindow, baseline, width: float, from_t: float | None = None) -> dict:
    """Every faulted instance serves again (its first ok answer sent after it was back: the journal's up_since
    after a restart, the revert for a link fault), and throughput is back within the steady state's interval,
    searched from from_t (where clients first saw the fault: capacity is restored after it was lost)."""
    parts, at = [], w.start
    for inst in w.instances:
        # back: after its restart (the journal's up_since), or at the revert of a link fault on the way to it;
        # never before the fault (an up_since from an earlier restart says nothing about this fault)
        since = w.back_at.get(inst) or (w.end if w.end is not None else w.start)
        front = inst in w.fronts  # a gateway: any ok answer sent after it was back passed it
        served = np.flatnonzero(tl.ok & (tl.start >= since) & (True if front else tl.served_by(inst)))
        if not len(served):
            why = "never served again" if w.end is not None else "was never brought back"
            return _figure(None, None, f"{inst} {why} before the run ended")
        first = float(tl.end[served].min())
        parts.append(f"{inst}{' (the gateway: every answer passes it)' if front else ''} served again "
                     f"{first - w.start:.3f} s after the fault")
        at = max(at, first)
    low = None if baseline is None else baseline.low
    if low is None:
        parts.append("throughput not judged: the steady state had too few answers for an interval")
    else:
        ok_end = tl.end[tl.ok]
        at = max(at, from_t if from_t is not None else w.start)
        ts = np.concatenate(([at], ok_end[ok_end >= at]))
        ts = ts[ts + width <= tl.t_last + 1e-9]  # a whole window must fit in the run
        n = np.searchsorted(ok_end, ts + width, side="right") - np.searchsorted(ok_end, ts, side="right")
        good = np.flatnonzero(n / width >= low)
        got = float(ts[good[0]]) if len(good) else None
        if got is None:
            return _figure(None, None, "; ".join(parts + [f"throughput never came back to {low:.2f} ok/s (the "
                                                          f"steady state's lower bound) before the run ended"]))
        parts.append(f"throughput back to >= {low:.2f} ok/s (steady state {baseline.value:.2f})")
        at = max(at, got)
    return _figure(at - w.start, at, "; ".join(parts))


def budget(tl: Timeline, start: float, until: float) -> dict:
    """Failed requests that ended in [start, until] (the failover point is the last failure's end), the seconds
    clients spent on them, and ok ones over the SLO's latency bound."""
    # + 1 µs: the moments in the report are rounded to the microsecond, the ends are not
    lo, hi = int(np.searchsorted(tl.end, start)), int(np.searchsorted(tl.end, until + 1e-6, side="right"))
    failed = tl.failed[lo:hi]
    seconds = float(tl.e2e[lo:hi][failed].sum())
    return {"failed_requests": int(failed.sum()), "failed_request_seconds": round(seconds, 3),
            "slow_requests": int(tl.slow[lo:hi].sum()), "requests": int(hi - lo),
            "evidence": "requests that ended from the fault until it was over and the service had failed over"}


def recovery(records, journal: list[dict], slo, baseline_window: tuple[float, float] | None, width: float = 5.0,
             confidence: float = 0.95) -> dict:
    """report.json's "recovery": the four figures per fault and for the run."""
    windows = fault_windows(journal)
    tl = Timeline(records, slo)
    if not windows or not len(tl.end):
        return {"faults": [], "run": None, "window_s": width}
    baseline = steady_rate(tl, *baseline_window, confidence) if baseline_window else None
    out = []
    for k, w in enumerate(windows):
        nxt = windows[k + 1].start if k + 1 < len(windows) else tl.t_last + 1
        det = detect(tl, w, nxt)
        # "again": the search starts where clients first saw the fault (a window before it proves nothing)
        fo = failover(tl, w.start, width, from_t=det["at"])
        # the budget: until the service failed over and the fault was over, whichever is later
        until = min(max(fo["at"] if fo["at"] is not None else nxt, w.end or w.start), nxt)
        out.append({"fault": w.name, "type": w.type, "start": w.start, "end": w.end, "instances": w.instances,
                    "time_to_detect": det, "time_to_failover": fo,
                    "time_to_restore": restore(tl, w, baseline, width, det["at"]),
                    "error_budget": budget(tl, w.start, max(until, w.start))})
    return {"faults": out, "run": _run_level(out, tl), "window_s": width,
            "baseline_throughput": None if baseline is None else baseline.to_dict()}


def _run_level(per_fault: list[dict], tl: Timeline) -> dict:
    """From the first fault: the first detection, the last failover and restore, the budget summed."""
    t0 = per_fault[0]["start"]
    dets = [f["time_to_detect"] for f in per_fault if f["time_to_detect"]["at"] is not None]
    first = min(dets, key=lambda d: d["at"], default=None)
    out = {"start": t0, "time_to_detect": _figure(first["at"] - t0, first["at"], first["evidence"]) if first
           else _figure(None, None, "no fault was detected by a client")}
    for name in ("time_to_failover", "time_to_restore"):
        figs = [f[name] for f in per_fault]
        if any(g["at"] is None for g in figs):
            miss = next(f for f in per_fault if f[name]["at"] is None)
            out[name] = _figure(None, None, f"{miss['fault']}: {miss[name]['evidence']}")
        else:
            last = max(figs, key=lambda g: g["at"])
            out[name] = _figure(last["at"] - t0, last["at"], last["evidence"], last.get("resolution_s"))
    b = [f["error_budget"] for f in per_fault]
    out["error_budget"] = {"failed_requests": sum(x["failed_requests"] for x in b),
                           "failed_request_seconds": round(sum(x["failed_request_seconds"] for x in b), 3),
                           "slow_requests": sum(x["slow_requests"] for x in b),
                           "requests": sum(x["requests"] for x in b), "evidence": "summed over the faults"}
    return out
