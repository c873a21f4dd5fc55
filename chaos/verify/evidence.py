"""A finished run turned into evidence: the phases with their intervals, the four recovery figures, the server's
metrics over time, the diagnosis and the advice. Everything here is computed from the run directory's files
(requests.jsonl, journal.jsonl, metrics.jsonl) and the analysis settings report.json keeps, so `chaos report
RUN_DIR` computes the same sections again without the runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .goodputspec import GoodputSLO
from .spec import SLO
from ..records.columns import as_columns
from . import diagnosis, phases, recovery

REPORT_VERSION = 2


@dataclass(slots=True)
class Settings:
    """What the analysis needs from the experiment, kept in report.json ("analysis")."""

    slo: SLO = field(default_factory=SLO)  # the steady-state SLO (error rate 0 when the file gives none)
    steady_window: float | None = 10.0
    recovery_window: float = 5.0
    open_loop: bool = False
    confidence: float = 0.95
    load_start: float | None = None
    load_end: float | None = None
    # the bounds a good request meets (steady_state.goodput); None: read from slo (a report from before goodput)
    goodput: GoodputSLO | None = None

    def __post_init__(self):
        if isinstance(self.goodput, dict):
            self.goodput = GoodputSLO(**self.goodput)
        if self.goodput is None:
            self.goodput = GoodputSLO.from_slo(self.slo)
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence {self.confidence}: give a level in [0.5, 1), e.g. 0.95")
        if self.recovery_window <= 0:
            raise ValueError("recovery_window must be > 0 seconds")

    def to_dict(self) -> dict:
        return {**asdict(self), "slo": asdict(self.slo), "goodput": self.goodput.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "Settings":
        d = dict(d)
        d["slo"] = SLO(**(d.get("slo") or {}))
        return cls(**{k: v for k, v in d.items() if k in cls.__slots__})


def settings_for(exp, load_start: float | None, load_end: float | None, open_loop: bool) -> Settings:
    slo = exp.steady_slo if not exp.steady_slo.is_empty() else SLO(error_rate=0.0)
    return Settings(slo=slo, steady_window=exp.steady_window, recovery_window=exp.verify.recovery_window,
                    open_loop=open_loop, load_start=load_start, load_end=load_end,
                    goodput=GoodputSLO.choose(exp.steady_goodput, exp.steady_slo))


def analyse(records, journal: list[dict], s: Settings, steps: list[dict], metrics: dict | None = None,
            stability: dict | None = None) -> dict:
    """The report sections: "analysis", "phases", "recovery", "diagnosis", "advice". records: a list, or
    chaos.records.columns.Columns (what `chaos report` reads: a file of any length in bounded memory)."""
    records = as_columns(records)  # once for every section
    ends = np.where(np.isnan(records.t_end) | (records.t_end == 0), records.t_start, records.t_end)
    load_start = (s.load_start if s.load_start is not None
                  else float(records.t_sched.min()) if len(records) else 0.0)
    load_end = float(ends.max()) if len(records) else load_start
    if s.load_end is not None:
        load_end = max(load_end, s.load_end)
    windows = recovery.fault_windows(journal)
    baseline = None
    if windows:
        first = windows[0].start
        baseline = (max(load_start, first - (s.steady_window or first - load_start)), first)
    rec = recovery.recovery(records, journal, s.slo, baseline, s.recovery_window, s.confidence)
    run = rec.get("run") or {}
    recovered_at = (run.get("time_to_failover") or {}).get("at")
    cut = phases.cut(windows, load_start, load_end, s.steady_window, recovered_at)
    table = phases.phase_table(records, cut, s.open_loop, s.confidence, s.goodput)
    bound = min([b for b in (s.slo.p95_latency, s.slo.p99_latency) if b is not None], default=None)
    return {
        "report_version": REPORT_VERSION,
        "analysis": s.to_dict(),
        "phases": table,
        "recovery": rec,
        "diagnosis": diagnosis.diagnose(records, steps, metrics, stability),
        "advice": diagnosis.advice(table, steps, bound),
    }
