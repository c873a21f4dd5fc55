"""The gate's paired figures: n pairs of runs, each pair a baseline run (a) and a candidate run (b) in an order a
fair coin chose, compared pair by pair (chaos/verify/paired.py has the statistics and why they hold).

Each figure takes one number from each pair:
  - a latency percentile of a phase: log(P_q of b's run / P_q of a's run), each run's own percentile (a run needs
    min_point_samples(q) requests in the phase); allowed change log(1 + max(tolerance, floor / P_q of a));
  - the error rate of a phase: b's minus a's; allowed change the error tolerance (absolute);
  - the goodput of a phase (chaos/verify/goodput.py, the baseline's bounds for both runs): its drop, a's minus b's;
    allowed change the error tolerance (absolute);
  - a recovery time of a fault: b's minus a's, a run that never recovered counted to the end of its load; allowed
    change max(tolerance x a's mean, the recovery floor);
  - the failed requests of a fault (its error budget): b's minus a's; allowed change max(tolerance x a's mean, 1);
  - aborted runs: 1 where only b's run was stopped by abort_when, -1 where only a's;
  - per metric (E2E, TTFT), every phase at once: the mean of the pair's latency log ratios (a build slower
    everywhere shows there beyond the noise of a few short runs, where each phase alone may not).
Beside d (what the tolerance is about) a figure carries z, the same change on a scale where it is near normal
(logs of times, of counts plus one, of rates), for the t test (chaos/gate/judge.py).

The host guard. A pair whose two runs saw a different host in the span a figure looks at (others' CPU apart by
more than the bound, chaos.host) is marked on that span's latency and recovery-time figures, with which run was
the busier (gap), and chaos/gate/judge.py leaves it out of the direction it could explain: a neighbour's slowdown
is not evidence about the build. Its failures still count, less the ones a slow host can cause (client timeouts,
408 and 504 answers), which are set aside in that pair's runs: an HTTP 500 is never the host's doing.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import numpy as np

from ..host import differs, load_summary, phase_summary
from ..records import read_records
from ..rundir.files import REQUESTS
from ..verify.paired import positive_mean_interval, ratio_interval, t_interval
from ..verify.goodput import good
from ..verify.goodputspec import GoodputSLO
from ..verify.phases import ended_in
from ..verify.samples import METRICS, errors, is_open_loop, latency
from ..verify.stats import Estimate, min_point_samples, proportion, rate
from .figures import GateSettings
from .rare import rare_error_figure
from .spans import figure, share_changes, shared, shared_phases, slow_host_failure, without_slow_failures
from .tails import spread_figures, tail_share_figure

RECOVERY = (("time_to_detect", "time to detect"), ("time_to_failover", "time to failover"),
            ("time_to_restore", "time to restore"))
ABORTED = 3
TIME_OFFSET_S = 0.1  # recovery times' t test reads log(time + this): a time of 0 s stays finite


def draw_orders(pairs: int, seed: int) -> list[str]:
    """Each pair's order, "ab" or "ba", by a fair coin from the seed."""
    rng = random.Random(seed)
    return ["ab" if rng.random() < 0.5 else "ba" for _ in range(pairs)]


@dataclass(slots=True)
class Run:
    run_dir: str
    report: dict
    records: list = field(default_factory=list)

    @classmethod
    def read(cls, run_dir: str, report: dict) -> Run:
        path = os.path.join(run_dir, REQUESTS)
        return cls(run_dir, report, read_records(path) if os.path.exists(path) else [])

    def phase(self, name: str) -> dict | None:
        return next((p for p in self.report.get("phases") or [] if p["name"] == name), None)

    def in_phase(self, name: str) -> list:
        ph = self.phase(name)
        return [] if ph is None else ended_in(self.records, ph["start"], ph["end"])

    def fault(self, name: str) -> dict | None:
        return next((f for f in (self.report.get("recovery") or {}).get("faults") or [] if f["fault"] == name), None)


@dataclass(slots=True)
class Pair:
    number: int  # 1-based, as gate.md names it
    order: str  # "ab" or "ba"
    a: Run
    b: Run

    def host_differs(self, span: str | None, bound: float) -> str | None:
        """Why this pair's hosts differ in the span (a phase or fault name; None: the whole load), or None."""
        if span is None:
            return differs(load_summary(self.a.report), load_summary(self.b.report), bound)
        return differs(phase_summary(self.a.report, span), phase_summary(self.b.report, span), bound)

    def host_gap(self, span: str | None) -> float | None:
        """Cores of others' CPU b's run saw beyond a's in the span (None: not measured)."""
        get = load_summary if span is None else (lambda rep: phase_summary(rep, span))
        ha, hb = get(self.a.report), get(self.b.report)
        if ha is None or hb is None or ha.others is None or hb.others is None:
            return None
        return hb.others - ha.others

    def measured(self) -> bool:
        return load_summary(self.a.report) is not None and load_summary(self.b.report) is not None


def _faults(run: Run) -> list[str]:
    return [f["fault"] for f in (run.report.get("recovery") or {}).get("faults") or []]


def _est(value, low, high, n, confidence, method) -> dict:
    return Estimate(value, low, high, n, confidence, method).to_dict()


def _latency_side(values: list[float], confidence: float) -> dict:
    """The runs' geometric mean of a percentile, with a t interval on its logs (3 runs or more)."""
    m, lo, hi = ratio_interval(np.log(values), confidence)
    return _est(m, lo, hi, len(values), confidence, "runs' geometric mean" if lo is None else "t on the runs' logs")


def estimates(fig: dict, keep: list[int], confidence: float) -> dict:
    """The sides and the change of a latency or recovery-time figure over the pairs it is judged on."""
    idx = [i for i, n in enumerate(fig["pairs"]) if n in keep]
    va, vb, d = ([fig[k][i] for i in idx] for k in ("va", "vb", "d"))
    if not idx:
        return {}
    if fig["kind"] == "latency":
        r, lo, hi = ratio_interval(d, confidence)
        return {"a": _latency_side(va, confidence), "b": _latency_side(vb, confidence),
                "ratio": _est(r, lo, hi, len(d), confidence, "t on the pairs' log ratios")}
    ma, la, ha, meth_a = positive_mean_interval(va, confidence)
    mb, lb, hb, meth_b = positive_mean_interval(vb, confidence)
    m, lo, hi = t_interval(d, confidence)
    return {"a": _est(ma, la, ha, len(va), confidence, meth_a), "b": _est(mb, lb, hb, len(vb), confidence, meth_b),
            "difference": _est(m, lo, hi, len(d), confidence, "t on the pairs' differences")}


def latency_figures(exp: str, pairs: list[Pair], s: GateSettings) -> list[dict]:
    out = []
    for phase in shared_phases(pairs):
        have = [p for p in pairs if p.a.phase(phase) and p.b.phase(phase)]
        host_out = {p.number: why for p in have if (why := p.host_differs(phase, s.host_bound))}
        for metric in METRICS:
            per_run = {}
            for p in have:
                for side, run in (("a", p.a), ("b", p.b)):
                    get = latency(metric, is_open_loop(run.report))
                    v = np.fromiter((x for r in run.in_phase(phase) if r.outcome == "ok"
                                     and (x := get(r)) is not None), float)
                    per_run[(p.number, side)] = np.sort(v)
            for q in s.percentiles:
                need = min_point_samples(q)
                short = [p.number for p in have if min(per_run[(p.number, "a")].size,
                                                       per_run[(p.number, "b")].size) < need]
                used = [p for p in have if p.number not in short]
                pa = [float(np.percentile(per_run[(p.number, "a")], q)) for p in used]
                pb = [float(np.percentile(per_run[(p.number, "b")], q)) for p in used]
                ok = [i for i in range(len(used)) if pa[i] > 0 and pb[i] > 0]
                used, pa, pb = [used[i] for i in ok], [pa[i] for i in ok], [pb[i] for i in ok]
                clean = [x for p, x in zip(used, pa) if p.number not in host_out] or pa
                base = float(np.exp(np.mean(np.log(clean)))) if clean else None
                tol = max(s.tolerance, s.floor_s / base) if base else s.tolerance
                out.append(figure(exp, phase, f"{metric} p{q:g}", "latency", pairs=[p.number for p in used],
                                   va=pa, vb=pb, d=[math.log(y / x) for x, y in zip(pa, pb)],
                                   gap=[p.host_gap(phase) for p in used],
                                   allowed=math.log1p(tol), tolerance=tol,
                                   excluded={"host": {n: w for n, w in host_out.items()
                                                      if n in {p.number for p in used}},
                                             "samples": short, "needs_samples": need}))
    return out


def overall_figures(exp: str, pairs: list[Pair], figs: list[dict], s: GateSettings) -> list[dict]:
    """Per metric (E2E, TTFT), every phase and percentile at once: a pair's number is the mean of its log ratios
    over the phase figures it has, its allowed change their mean allowed change. A build slower everywhere by a
    third moves each phase's figure by about as much as the noise of a few short runs, and all of them together
    far beyond it; this is the figure that sees that. Its host guard is the whole load's."""
    out = []
    for metric in METRICS:
        parts = [f for f in figs if f["metric"].startswith(metric + " ")]
        if not parts:
            continue
        host_out = {p.number: why for p in pairs if (why := p.host_differs(None, s.host_bound))}
        used, va, vb, d = [], [], [], []
        for p in pairs:
            mine = [(f["va"][k], f["vb"][k], f["d"][k]) for f in parts for k, n in enumerate(f["pairs"])
                    if n == p.number]
            if len(mine) * 2 < len(parts):  # a pair with under half the figures (an aborted run) says too little
                continue
            used.append(p.number)
            va.append(float(np.exp(np.mean(np.log([x for x, _, _ in mine])))))
            vb.append(float(np.exp(np.mean(np.log([y for _, y, _ in mine])))))
            d.append(float(np.mean([z for _, _, z in mine])))
        allowed = float(np.mean([f["allowed"] for f in parts]))
        gap = {p.number: p.host_gap(None) for p in pairs}
        out.append(figure(exp, "every phase", f"{metric} (all percentiles)", "latency", pairs=used, va=va, vb=vb,
                           d=d, allowed=allowed, tolerance=math.expm1(allowed), gap=[gap[n] for n in used],
                           excluded={"host": {n: w for n, w in host_out.items() if n in used}, "samples": [],
                                     "needs_samples": 0}))
    return out


def error_figures(exp: str, pairs: list[Pair], s: GateSettings) -> list[dict]:
    out = []
    for phase in shared_phases(pairs):
        have = [p for p in pairs if p.a.phase(phase) and p.b.phase(phase)]
        set_aside: dict = {}
        hosts = {p.number: p.host_differs(phase, s.host_bound) for p in have}
        d, z, used, (ka, na, kb, nb) = share_changes(have, lambda p, run: errors(without_slow_failures(
            run.in_phase(phase), hosts[p.number], set_aside, p.number)))
        fig = figure(exp, phase, "error rate", "proportion", pairs=used, d=d, z=z,
                      allowed=s.error_tolerance, tolerance=s.error_tolerance,
                      excluded={"host": {}, "set_aside": {k: v for k, v in set_aside.items() if v}})
        out.append(_shares(fig, d, (ka, na, kb, nb), s.confidence, "t on the pairs' differences"))
    return out


def _shares(fig: dict, d: list, totals: tuple, confidence: float, method: str) -> dict:
    """A share figure's sides (Wilson, from the pooled counts) and the pairs' mean difference with its t interval."""
    ka, na, kb, nb = totals
    if na and nb:
        m, lo, hi = t_interval(d, confidence)
        fig.update(a=proportion(ka, na, confidence).to_dict(), b=proportion(kb, nb, confidence).to_dict(),
                   difference=_est(m, lo, hi, len(d), confidence, method))
    return fig


def goodput_figures(exp: str, pairs: list[Pair], s: GateSettings) -> list[dict]:
    """Per phase, the share of requests that met the SLO, by the bounds the first baseline run counted with (both
    sides judged alike); none where it had none. A drop is worse: d is a's share less b's, z the change in the
    log of the share not good (as the error rate's). A slow host makes requests miss a latency bound, so a pair
    whose hosts differed is marked as for latency (with its gap), not set aside request by request."""
    given = next((g for p in pairs if (g := (p.a.report.get("analysis") or {}).get("goodput"))), None)
    bounds = GoodputSLO(**{k: given.get(k) for k in ("ttft", "tpot", "e2e", "source")}) if given else None
    if bounds is None or bounds.is_empty():
        return []
    out = []
    for phase in shared_phases(pairs):
        have = [p for p in pairs if p.a.phase(phase) and p.b.phase(phase)]
        host_out = {p.number: why for p in have if (why := p.host_differs(phase, s.host_bound))}
        def not_good(p, run) -> tuple[int, int]:
            recs = [r for r in run.in_phase(phase) if r.outcome != "cancelled"]
            k = int(good(recs, np.ones(len(recs), bool), bounds, is_open_loop(run.report)).sum()) if recs else 0
            return len(recs) - k, len(recs)

        # the share not good rises as goodput drops: d is the drop, z the change in the log of the share not good
        d, z, used, (ka, na, kb, nb) = share_changes(have, not_good)
        ka, kb = na - ka, nb - kb  # the sides' good counts
        fig = figure(exp, phase, "goodput drop", "proportion", pairs=used, d=d, z=z, bounds=bounds.to_dict(),
                      gap=[p.host_gap(phase) for p in have if p.number in used],
                      allowed=s.error_tolerance, tolerance=s.error_tolerance,
                      excluded={"host": {n: w for n, w in host_out.items() if n in used}})
        out.append(_shares(fig, d, (ka, na, kb, nb), s.confidence, "t on the pairs' drops"))
    return out


def _censored_value(run: Run, fault: dict, key: str) -> tuple[float | None, bool]:
    v = (fault.get(key) or {}).get("value")
    if v is not None:
        return v, False
    if key == "time_to_detect":
        return None, True  # no client saw the fault: nothing to time (the best outcome, not a long time)
    ends = [r.t_end for r in run.records if r.t_end is not None]
    return (max(ends) - fault["start"] if ends else None), True


def recovery_figures(exp: str, pairs: list[Pair], s: GateSettings) -> list[dict]:
    out = []
    for name in shared(pairs, _faults):
        have = [p for p in pairs if p.a.fault(name) and p.b.fault(name)]
        host_out = {p.number: why for p in have if (why := p.host_differs(name, s.host_bound))}
        for key, label in RECOVERY:
            used, va, vb, censored = [], [], [], {"a": 0, "b": 0}
            unseen = []
            for p in have:
                (x, cx), (y, cy) = (_censored_value(p.a, p.a.fault(name), key),
                                    _censored_value(p.b, p.b.fault(name), key))
                censored["a"] += cx
                censored["b"] += cy
                if x is None or y is None:
                    unseen.append(p.number)
                    continue
                used.append(p.number)
                va.append(x)
                vb.append(y)
            clean = [x for n, x in zip(used, va) if n not in host_out] or va
            allowed = max(s.tolerance * float(np.mean(clean)), s.recovery_floor_s) if clean else s.recovery_floor_s
            gap = {p.number: p.host_gap(name) for p in have}
            out.append(figure(exp, name, label, "value", unit="s", pairs=used, va=va, vb=vb,
                               gap=[gap[n] for n in used],
                               d=[y - x for x, y in zip(va, vb)], allowed=allowed, censored=censored,
                               z=[math.log((y + TIME_OFFSET_S) / (x + TIME_OFFSET_S)) for x, y in zip(va, vb)],
                               excluded={"host": {n: w for n, w in host_out.items() if n in used},
                                         "unseen": unseen}))
        out.append(budget_figure(exp, name, have, s))
    return out


def budget_figure(exp: str, fault: str, have: list[Pair], s: GateSettings) -> dict:
    ca, cb, set_aside = [], [], {}
    for p in have:
        host = p.host_differs(fault, s.host_bound)
        counts = []
        for run in (p.a, p.b):
            n = ((run.fault(fault) or {}).get("error_budget") or {}).get("failed_requests") or 0
            if host:  # a slow host's failures are set aside (counted in the fault's window)
                slow = sum(1 for r in run.in_phase(fault) if slow_host_failure(r))
                set_aside[p.number] = set_aside.get(p.number, 0) + min(n, slow)
                n = max(0, n - slow)
            counts.append(n)
        ca.append(counts[0])
        cb.append(counts[1])
    d = [y - x for x, y in zip(ca, cb)]
    allowed = max(s.tolerance * float(np.mean(ca)), 1.0) if ca else 1.0
    fig = figure(exp, fault, "failed requests per run", "count", pairs=[p.number for p in have], d=d,
                  z=[math.log1p(y) - math.log1p(x) for x, y in zip(ca, cb)],
                  allowed=allowed, values={"a": ca, "b": cb},
                  excluded={"host": {}, "set_aside": {k: v for k, v in set_aside.items() if v}})
    if have:
        m, lo, hi = t_interval(d, s.confidence)
        fig.update(a=rate(sum(ca), len(ca), s.confidence).to_dict(), b=rate(sum(cb), len(cb), s.confidence).to_dict(),
                   difference=_est(m, lo, hi, len(d), s.confidence, "t on the pairs' differences"))
    return fig


def aborted_figure(exp: str, pairs: list[Pair]) -> dict:
    ka = sum(p.a.report.get("exit_code") == ABORTED for p in pairs)
    kb = sum(p.b.report.get("exit_code") == ABORTED for p in pairs)
    d = [float(p.b.report.get("exit_code") == ABORTED) - float(p.a.report.get("exit_code") == ABORTED)
         for p in pairs]
    return figure(exp, "run", "runs aborted by abort_when", "count", pairs=[p.number for p in pairs], d=d,
                   allowed=0.0, a={"value": ka, "n": len(pairs)}, b={"value": kb, "n": len(pairs)},
                   excluded={"host": {}}, counted=True)


def experiment_figures(exp: str, pairs: list[Pair], s: GateSettings) -> list[dict]:
    lat = latency_figures(exp, pairs, s)
    return (overall_figures(exp, pairs, lat, s) + lat + [tail_share_figure(exp, pairs, s)]
            + spread_figures(exp, pairs, s) + error_figures(exp, pairs, s) + [rare_error_figure(exp, pairs, s)]
            + goodput_figures(exp, pairs, s) + recovery_figures(exp, pairs, s) + [aborted_figure(exp, pairs)])
