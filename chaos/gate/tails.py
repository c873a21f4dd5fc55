"""Two paired figures for what a median and a few per-phase percentiles miss (docs/gate.md, "What canary analysis
misses"), built like chaos/gate/pairs.py's and judged with them (chaos/gate/judge.py, Holm over every figure):

  - the tail share, every phase at once: a pair's change is the share of b's requests slower than b's own median
    times a's P95 / P50 (in the same phase), less the share of a's slower than a's median times b's P95 / P50.
    The tail's shape, not its place: a run slower or faster all over (a pair's runs differ by 10-25 % on a shared
    box) moves both its median and its P95 and leaves it. A build whose median request is untouched and a few per
    cent stall moves it by those few per cent in every pair, where a per-run P99 needs 100 requests a phase and
    the short phases of a gate have fewer. Crossed, so under no change swapping the pair's runs flips its sign,
    which the coins make equally likely. The tolerance: the same shares with the reach beyond the median b is held
    to (P95 / P50 - 1) widened by (1 + tolerance) (and at least the floor, in seconds) and the one a is held to
    narrowed as much: a tail whose reach grew by less than the tolerance reads as no change or better;
  - the spread of inter-token gaps, per phase: log(P75 / P25) of every gap between two tokens of a run's
    requests (the inter-quartile range of log ITL), b's over a's, in log. Scale-free: a build slower everywhere
    by a factor leaves it, a build whose steps or requests spread wider at the same median raises it.
"""

from __future__ import annotations

import math

import numpy as np

from ..verify.paired import ratio_interval, t_interval
from ..verify.samples import is_open_loop, latency
from ..verify.stats import Estimate, min_point_samples, proportion
from .figures import GateSettings
from .spans import figure, run_phases, shared_phases

TAIL_Q = 95  # the tail's percentile: 20 requests a phase give a P95; a P99 needs 100, more than a gate's phases
SPREAD_MIN_GAPS = 40  # gaps a run needs in a phase for its quartiles


def _e2e(run, phase: str) -> np.ndarray:
    get = latency("E2E", is_open_loop(run.report))
    return np.fromiter((x for r in run.in_phase(phase) if r.outcome == "ok" and (x := get(r)) is not None), float)


def tail_share_figure(exp: str, pairs: list, s: GateSettings) -> dict:
    need = min_point_samples(TAIL_Q)
    c = 1 + s.tolerance
    host_out = {p.number: why for p in pairs if (why := p.host_differs(None, s.host_bound))}
    used, d, z, diff, short = [], [], [], [], []
    tot = {"ea": 0, "na": 0, "eb": 0, "nb": 0}
    for p in pairs:
        ea = eb = ta = tb = na = nb = 0
        for phase in [n for n in run_phases(p.a) if p.b.phase(n)]:
            va, vb = _e2e(p.a, phase), _e2e(p.b, phase)
            if min(va.size, vb.size) < need:
                continue
            (ma, qa), (mb, qb) = np.percentile(va, (50, TAIL_Q)), np.percentile(vb, (50, TAIL_Q))
            if min(ma, mb) <= 0:
                continue
            # each run's requests against its own median times the other run's P95 / P50: the tail's shape,
            # whatever the run's pace (a pair's runs differ by 10-25 % overall on a shared box)
            ra, rb = qa / ma, qb / mb
            eb, ea = eb + int(np.count_nonzero(vb > mb * ra)), ea + int(np.count_nonzero(va > ma * rb))
            # the tolerance is on the tail's reach beyond the median (P95 / P50 - 1), the floor on it in seconds
            xa, xb = ra - 1, rb - 1
            tb += int(np.count_nonzero(vb > mb * (1 + max(c * xa, xa + s.floor_s / mb))))
            ta += int(np.count_nonzero(va > ma * (1 + max(0.0, min(xb / c, xb - s.floor_s / ma)))))
            na, nb = na + va.size, nb + vb.size
        if not na:
            short.append(p.number)
            continue
        used.append(p.number)
        d.append(tb / nb - ta / na)
        diff.append(eb / nb - ea / na)
        z.append(math.log((eb + 0.5) / (nb + 1)) - math.log((ea + 0.5) / (na + 1)))
        tot.update(ea=tot["ea"] + ea, na=tot["na"] + na, eb=tot["eb"] + eb, nb=tot["nb"] + nb)
    gap = {p.number: p.host_gap(None) for p in pairs}
    fig = figure(exp, "every phase", f"E2E share beyond the other run's P{TAIL_Q}", "proportion", pairs=used, d=d,
                  z=z, allowed=0.0, tolerance=s.tolerance, gap=[gap[n] for n in used],
                  excluded={"host": {n: w for n, w in host_out.items() if n in used}, "samples": short,
                            "needs_samples": need, "samples_are": "requests"})
    if used:
        m, lo, hi = t_interval(diff, s.confidence)
        fig.update(a=proportion(tot["ea"], tot["na"], s.confidence).to_dict(),
                   b=proportion(tot["eb"], tot["nb"], s.confidence).to_dict(),
                   difference=Estimate(m, lo, hi, len(diff), s.confidence, "t on the pairs' differences").to_dict())
    return fig


def _gaps(run, phase: str) -> np.ndarray:
    gaps = [g for r in run.in_phase(phase) if r.outcome == "ok" for g in (r.itl_us or ())]
    return np.asarray(gaps, float) / 1e6


def _spread(gaps: np.ndarray) -> float | None:
    """log(P75 / P25) of a run's gaps; None where too few, or a quartile is 0 (a clock that did not move)."""
    if gaps.size < SPREAD_MIN_GAPS:
        return None
    q1, q3 = np.percentile(gaps, (25, 75))
    return float(math.log(q3 / q1)) if q1 > 0 and q3 > q1 else None


def spread_figures(exp: str, pairs: list, s: GateSettings) -> list[dict]:
    out = []
    for phase in shared_phases(pairs):
        have = [p for p in pairs if p.a.phase(phase) and p.b.phase(phase)]
        host_out = {p.number: why for p in have if (why := p.host_differs(phase, s.host_bound))}
        used, va, vb, short = [], [], [], []
        gaps = {p.number: (_gaps(p.a, phase), _gaps(p.b, phase)) for p in have}
        if not any(ga.size or gb.size for ga, gb in gaps.values()):
            continue  # a load that streams nothing (or records from before gaps were kept): no figure, not a hole
        for p in have:
            sa, sb = (_spread(g) for g in gaps[p.number])
            if sa is None or sb is None:
                short.append(p.number)
                continue
            used.append(p.number)
            va.append(sa)
            vb.append(sb)
        d = [math.log(y / x) for x, y in zip(va, vb)]
        fig = figure(exp, phase, "ITL spread (log P75/P25)", "spread", pairs=[p.number for p in have
                                                                             if p.number in used],
                      d=d, allowed=math.log1p(s.tolerance), tolerance=s.tolerance,
                      gap=[p.host_gap(phase) for p in have if p.number in used],
                      excluded={"host": {n: w for n, w in host_out.items() if n in used}, "samples": short,
                                "needs_samples": SPREAD_MIN_GAPS, "samples_are": "inter-token gaps"})
        if used:
            fig.update(a=_side(va, s.confidence), b=_side(vb, s.confidence))
            r, lo, hi = ratio_interval(d, s.confidence)
            fig["ratio"] = Estimate(r, lo, hi, len(d), s.confidence, "t on the pairs' log ratios").to_dict()
        out.append(fig)
    return out


def _side(values: list[float], confidence: float) -> dict:
    m, lo, hi = ratio_interval(np.log(values), confidence)
    return Estimate(m, lo, hi, len(values), confidence, "runs' geometric mean, t on the logs").to_dict()
