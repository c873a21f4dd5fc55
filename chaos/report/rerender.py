"""`chaos report RUN_DIR`: every format written again from the run directory's files.

The records, the journal and the scraped metrics are the evidence; report.json keeps what only the runner knew
(the checks it judged, the faults' errors, the target) and the settings the evidence was computed with
("analysis"). A run killed before it wrote report.json still gets a report: its verdict is "incomplete" and it
has no checks, but the phases, the recovery figures and the plots come from what it recorded.
"""

from __future__ import annotations

import json
import os

from ..errors import InputError
from ..host import host_report
from ..records.columns import Columns
from ..records.summary import summarize_steps
from ..rundir.files import JOURNAL, METRICS_FILE, REPORT_JSON, REQUESTS, RESOLVED
from ..rundir.journal import Event, read_journal
from ..verify.evidence import REPORT_VERSION, Settings, analyse
from .servermetrics import summarize_metrics
from .writer import write_reports


class ReportError(InputError):
    """A run directory that cannot be reported on; the message says what to do."""


def _minimal(run_dir: str, journal: list[dict]) -> dict:
    """What a run that never wrote report.json can still say, from its journal."""
    start = next((e for e in journal if e.get("event") == Event.RUN_STARTED), {})
    load = next((e for e in journal if e.get("event") == Event.LOAD_STARTED), {})
    end = next((e for e in journal if e.get("event") == Event.RUN_FINISHED), None)
    faults = [{"name": e["fault"], "type": e.get("type", ""), "description": "", "applied": True,
               "reverted": any(x.get("event") == Event.FAULT_REVERTED and x.get("fault") == e["fault"] for x in journal),
               "applied_at": e["t"], "reverted_at": None, "apply_error": None, "revert_error": None}
              for e in journal if e.get("event") == Event.FAULT_APPLYING and e.get("fault")]
    return {"experiment": {"name": start.get("experiment") or os.path.basename(os.path.abspath(run_dir))},
            "verdict": (end or {}).get("verdict") or "incomplete", "exit_code": (end or {}).get("exit_code"),
            "reason": None if end else "the run ended before it wrote report.json (killed?): no checks were judged",
            "started": start.get("t"), "load_started": load.get("t"),
            "duration_s": journal[-1]["t"] - start["t"] if journal and start.get("t") else None,
            "target": {}, "checks": [], "faults": faults, "notes": [], "inputs": []}


def _settings(run_dir: str, report: dict) -> Settings:
    if report.get("analysis"):
        return Settings.from_dict(report["analysis"])
    path = os.path.join(run_dir, RESOLVED)
    try:  # a report from before version 2: the experiment's own settings, as the runner would have taken them
        from ..experiment.model import load_experiment
        from ..verify.evidence import settings_for

        return settings_for(load_experiment(path), report.get("load_started"), None, False)
    except Exception:  # noqa: BLE001 - an unreadable or foreign file: the defaults, said in the notes
        report.setdefault("notes", []).append("the experiment file could not be read again: the evidence uses "
                                              "the default SLO (no errors) and windows")
        return Settings(load_start=report.get("load_started"))


def rerender(run_dir: str) -> dict:
    """Recompute the evidence and write report.json, report.md, report.html and junit.xml again."""
    req = os.path.join(run_dir, REQUESTS)
    if not os.path.isdir(run_dir):
        raise ReportError(f"{run_dir}: no such directory; give a run directory (reports/NAME-UTC)")
    if not os.path.exists(req):
        raise ReportError(f"{run_dir}: no requests.jsonl here: is this a run directory of `chaos run` or "
                          f"`chaos load`?")
    records = Columns.read(req)  # streaming: the fields the report reads, never every record as an object
    jpath = os.path.join(run_dir, JOURNAL)
    journal = read_journal(jpath) if os.path.exists(jpath) else []
    rpath = os.path.join(run_dir, REPORT_JSON)
    report = None
    if os.path.exists(rpath):
        try:
            with open(rpath) as f:
                report = json.load(f)
        except ValueError:
            report = None  # cut by a kill mid-write: rebuilt from the journal
    if not isinstance(report, dict):
        report = _minimal(run_dir, journal)
    s = _settings(run_dir, report)
    order = [st["step"] for st in report.get("steps") or []]
    durations = {st["step"]: st.get("duration_s") for st in report.get("steps") or [] if st.get("duration_s")}
    steps = summarize_steps(records, order, s.open_loop, durations)
    mpath = os.path.join(run_dir, METRICS_FILE)
    if os.path.exists(mpath):
        report["server_metrics"] = summarize_metrics(mpath)
    report.update({"report_version": REPORT_VERSION, "steps": [x.to_dict() for x in steps],
                   "requests": len(records), "timeline": journal or report.get("timeline") or []})
    report.update(analyse(records, report["timeline"], s, report["steps"], report.get("server_metrics"),
                          report.get("stability")))
    report["host"] = host_report(run_dir, report)
    write_reports(run_dir, report, steps)
    return report
