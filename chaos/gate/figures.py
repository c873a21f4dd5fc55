"""The gate's figures: repeated runs of one experiment against the baseline (a) and the candidate (b), compared
figure by figure, under the faults as well as in the steady state.

Per phase both sides have (the steady state, each fault's window, after recovery; or the whole run where there
is no fault), pooling the records of every run of a side:
  - E2E and TTFT percentiles: bootstrap of the ratio in two stages, drawing runs and then whole 0.5 s windows of
    start time within each (runs differ by the host's state; requests in flight together share its hiccups),
    beyond max(tolerance, floor);
  - the error rate: Newcombe interval of the difference, beyond an absolute tolerance.
Per fault, one value a run:
  - time to detect, to fail over, to restore capacity: Welch's t test on the runs' values, beyond
    max(tolerance x baseline mean, recovery floor); a run that never recovered counts the rest of its load, a
    lower bound (censored: said so);
  - the error budget (failed requests in the fault's span): two Poisson rates, failed requests per run.
Every verdict of a gate is corrected together (Holm) by the caller, so a no-change upgrade is called a
regression at most alpha of the time, however many figures there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..host import DEFAULT_BOUND
from ..records import read_records
from ..rundir.files import REQUESTS
from ..verify import compare as C
from ..verify.phases import ended_in
from ..verify.samples import METRICS, errors, is_open_loop, latency, windowed
from ..verify.stats import min_point_samples

RECOVERY = (("time_to_detect", "time to detect"), ("time_to_failover", "time to failover"),
            ("time_to_restore", "time to restore"))


@dataclass(slots=True)
class GateSettings:
    confidence: float = 0.95
    tolerance: float = 0.10  # relative: latency, recovery times, failed requests per run
    floor_s: float = 0.005  # latency: a change smaller than this never counts (BENCHMARKS.md §14)
    recovery_floor_s: float = 0.5  # recovery times: the verifier's own resolution is a few hundred ms
    error_tolerance: float = 0.01  # absolute: one percentage point of error rate
    percentiles: tuple = (50, 95, 99)
    host_bound: float = DEFAULT_BOUND  # cores of others' CPU two compared runs may differ by (chaos.host)
    # The bootstrap's p resolves no finer than 1/resamples, and Holm asks the smallest of m figures for alpha/m:
    # 10,000 leaves room for 500 figures at 95 % (about 20 experiments).
    resamples: int = 10000

    def __post_init__(self):
        if not 0 < self.confidence < 1:
            raise ValueError("confidence must be in (0, 1), e.g. 0.95")
        if not 0 <= self.tolerance < 1 or not 0 <= self.error_tolerance < 1:
            raise ValueError("tolerances must be in [0, 1): 0.1 is 10 %")
        if self.floor_s < 0 or self.recovery_floor_s < 0:
            raise ValueError("floors are durations >= 0")
        if not self.percentiles or any(not 0 < q < 100 for q in self.percentiles):
            raise ValueError("percentiles are numbers in (0, 100), e.g. 50,95,99")
        if not self.host_bound > 0:
            raise ValueError("--host-bound is cores of CPU (e.g. 0.25), more than 0")


@dataclass(slots=True)
class Side:
    """The runs of one side (a or b) of one experiment: run directories with their records and reports."""
    run_dirs: list[str]
    reports: list[dict]
    records: list[list] = field(default_factory=list)

    @classmethod
    def read(cls, run_dirs: list[str], reports: list[dict]) -> Side:
        import os

        recs = []
        for d in run_dirs:
            path = os.path.join(d, REQUESTS)
            recs.append(read_records(path) if os.path.exists(path) else [])
        return cls(list(run_dirs), list(reports), recs)

    def phases(self) -> list[str]:
        """Phase names every run has, in the first run's order."""
        names = [[p["name"] for p in r.get("phases") or []] for r in self.reports]
        if not names:
            return []
        return [n for n in names[0] if all(n in other for other in names[1:])]

    def in_phase(self, name: str) -> list[tuple[int, list]]:
        out = []
        for i, (rep, recs) in enumerate(zip(self.reports, self.records)):
            ph = next(p for p in rep["phases"] if p["name"] == name)
            out.append((i, ended_in(recs, ph["start"], ph["end"])))
        return out

    def dropped(self) -> list[str]:
        """Phases and faults some run of this side has and another lacks (not compared)."""
        every = set(self.phases()) | set(self.faults())
        seen = {p["name"] for r in self.reports for p in r.get("phases") or []}
        seen |= {f["fault"] for r in self.reports for f in (r.get("recovery") or {}).get("faults") or []}
        return sorted(seen - every)

    def latency(self, metric: str):
        """The latency getter for this side's records: open-loop runs count from when each request was due."""
        return latency(metric, open_loop=any(is_open_loop(r) for r in self.reports))

    def faults(self) -> list[str]:
        names = [[f["fault"] for f in (r.get("recovery") or {}).get("faults") or []] for r in self.reports]
        if not names:
            return []
        return [n for n in names[0] if all(n in other for other in names[1:])]


def phase_figures(exp: str, a: Side, b: Side, s: GateSettings) -> list[dict]:
    out = []
    names = [n for n in a.phases() if n in b.phases()]
    for phase in names:
        if phase == "whole run" and len(names) > 1:
            continue
        ra, rb = a.in_phase(phase), b.in_phase(phase)
        for metric in METRICS:
            (va, ga, wa), (vb, gb, wb) = windowed(ra, a.latency(metric)), windowed(rb, b.latency(metric))
            res = C.compare_latency(va, vb, s.confidence, tolerance=s.tolerance, resamples=s.resamples,
                                    qs=s.percentiles, name=f"{exp} · {phase} {metric}", groups=(ga, gb),
                                    floor=s.floor_s, runs=(wa, wb))
            for q in s.percentiles:
                fig = res[f"p{q:g}"]
                fig.update(experiment=exp, phase=phase, metric=f"{metric} p{q:g}")
                if fig["verdict"] == C.NOT_JUDGED:
                    need = min_point_samples(q)
                    per_side = {"a": _runs_needed(need, va.size, len(a.run_dirs)),
                                "b": _runs_needed(need, vb.size, len(b.run_dirs))}
                    short = "a" if va.size < need else "b"
                    fig.update(needs_runs=per_side[short], short_side=short)
                out.append(fig)
        (fa, na), (fb, nb) = errors([r for _, recs in ra for r in recs]), errors([r for _, recs in rb for r in recs])
        fig = C.compare_proportions(fa, na, fb, nb, s.confidence, tolerance=s.error_tolerance,
                                    name=f"{exp} · {phase} error rate")
        fig.update(experiment=exp, phase=phase, metric="error rate")
        out.append(fig)
    return out


def _runs_needed(need: int, have: int, runs: int) -> int:
    """Runs a side needs to hold `need` samples, at the rate its runs gave them."""
    if have <= 0 or runs <= 0:
        return runs + 1
    return max(runs + 1 if have < need else runs, math.ceil(need * runs / have))


def _recovery(rep: dict, fault: str) -> dict:
    return next(f for f in rep["recovery"]["faults"] if f["fault"] == fault)


def _censor(side: Side, i: int, fault: dict) -> float | None:
    """A run that never recovered: the time from the fault to the end of its load (a lower bound)."""
    ends = [r.t_end for r in side.records[i] if r.t_end is not None]
    return max(ends) - fault["start"] if ends else None


def recovery_figures(exp: str, a: Side, b: Side, s: GateSettings) -> list[dict]:
    out = []
    for fault in [f for f in a.faults() if f in b.faults()]:
        for key, label in RECOVERY:
            values, censored = {}, {}
            for side_name, side in (("a", a), ("b", b)):
                vals, cens = [], 0
                for i, rep in enumerate(side.reports):
                    f = _recovery(rep, fault)
                    v = (f.get(key) or {}).get("value")
                    if v is None and key == "time_to_detect":
                        cens += 1  # no client saw the fault: the best outcome, not a long time
                        continue
                    if v is None:
                        v, cens = _censor(side, i, f), cens + 1
                    if v is not None:
                        vals.append(v)
                values[side_name], censored[side_name] = vals, cens
            fig = C.compare_values(values["a"], values["b"], s.confidence, tolerance=s.tolerance,
                                   floor=s.recovery_floor_s, name=f"{exp} · {fault} {label}")
            fig.update(experiment=exp, phase=fault, metric=label, censored=censored)
            if fig["verdict"] == C.NOT_JUDGED:
                if key == "time_to_detect" and (censored["a"] or censored["b"]):
                    fig.pop("needs_runs", None)  # a side where clients never saw it: nothing to time, no more runs
                    fig["why"] = (f"no client saw the fault in {censored['a']} baseline / {censored['b']} candidate "
                                  f"runs: detection is not timed there")
                else:
                    fig["short_side"] = "a" if len(values["a"]) < 2 else "b"
            out.append(fig)
        fa = [(_recovery(rep, fault).get("error_budget") or {}).get("failed_requests") or 0 for rep in a.reports]
        fb = [(_recovery(rep, fault).get("error_budget") or {}).get("failed_requests") or 0 for rep in b.reports]
        fig = C.compare_rates(sum(fa), len(fa), sum(fb), len(fb), s.confidence, tolerance=s.tolerance,
                              name=f"{exp} · {fault} failed requests per run", higher_is_better=False)
        fig.update(experiment=exp, phase=fault, metric="error budget (failed requests per run)",
                   values={"a": fa, "b": fb})
        out.append(fig)
    return out


def experiment_figures(exp: str, a: Side, b: Side, s: GateSettings) -> list[dict]:
    return phase_figures(exp, a, b, s) + recovery_figures(exp, a, b, s)
