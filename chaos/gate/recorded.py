"""Recorded baseline runs (`chaos gate --baseline DIR`): finding them in a gate's, a game day's or a run's folder,
checking they ran the experiments the candidate will run, and comparing the two sides, their hosts guarded."""

from __future__ import annotations

import json
import os

from ..host import HostSummary, differs, load_summary, phase_summary
from ..rundir.files import REPORT_JSON
from ..suite.execute import ABORTED, read_report
from ..suite.model import Suite
from ..verify import compare as C
from .figures import GateSettings, Side, experiment_figures
from .verdict import RAN, GateError, decide, settle_empty


def recorded_runs(path: str, suite: Suite) -> dict[str, list[str]]:
    """The baseline runs in a gate's, a game day's or one run's directory, by suite entry name."""
    path = os.path.abspath(path)
    for name in ("gate.json", "gameday.json"):
        p = os.path.join(path, name)
        if os.path.exists(p):
            try:
                with open(p) as f:
                    doc = json.load(f)
                if not isinstance(doc, dict) or not isinstance(doc.get("runs", []), list):
                    raise ValueError("not the object chaos wrote")
            except (OSError, ValueError) as e:
                raise GateError(f"{p}: cannot be read as a baseline ({e}); give the folder a gate or game day "
                                f"finished, or --baseline-target to run the baseline now") from None
            found: dict[str, list[str]] = {}
            for run in doc.get("runs", []):
                # a gate's candidate runs (the build that passed) make the next gate's baseline
                if name == "gate.json" and run.get("side") != "b":
                    continue
                if run.get("exit_code") in RAN:
                    found.setdefault(run["name"], []).append(abs_run_dir(path, run["run_dir"]))
            missing = [e.name for e in suite.entries if e.name not in found]
            if missing:
                raise GateError(f"{path}: no finished baseline run of {', '.join(missing)}: the baseline must have "
                                f"run every experiment of the suite (or give --baseline-target)")
            return found
    if os.path.exists(os.path.join(path, REPORT_JSON)):
        rep = read_report(path)
        exp_name = (rep.get("experiment") or {}).get("name")
        for e in suite.entries:
            if exp_name in (e.name, os.path.splitext(os.path.basename(e.file))[0]):
                return {e.name: [path]}
        raise GateError(f"{path}: its experiment {exp_name!r} is not in the suite {suite.path}")
    raise GateError(f"{path}: not a run, game day or gate directory (no report.json, gameday.json or gate.json)")


# What makes two runs runs of the same experiment, whatever target they ran against.
SAME_KEYS = ("load", "faults", "steady_state", "verify")


def check_recorded(runs: dict[str, list[str]], suite: Suite, target: str) -> None:
    """Recorded baseline runs must be runs of the experiments the candidate will run, with records: the load,
    faults, steady state and checks as the candidate's experiment resolves them (variables included). A gate
    never compares runs of different experiments, nor a run that recorded nothing."""
    from ..experiment.model import load_experiment
    from ..records import read_records
    from ..rundir.files import REQUESTS, RESOLVED

    for e in suite.entries:
        want = load_experiment(e.file, e.vars, target=target).resolved  # e.vars has the --var values too
        for run_dir in runs.get(e.name, []):
            try:
                with open(os.path.join(run_dir, RESOLVED)) as f:
                    had = json.load(f)
            except (OSError, ValueError):
                had = None  # a run of an older version: what it ran cannot be compared
            if had is not None:
                differ = [k for k in SAME_KEYS if had.get(k) != want.get(k)]
                if differ:
                    raise GateError(f"{run_dir}: a run of another experiment than {e.name}'s: its "
                                    f"{' and '.join(differ)} differ from what {e.file} gives now (see "
                                    f"{RESOLVED} there); give the same experiment and --var values, or a baseline "
                                    f"that ran them")
            if not read_records(os.path.join(run_dir, REQUESTS)):
                raise GateError(f"{run_dir}: the run recorded no requests ({REQUESTS} is empty or missing): "
                                f"nothing to compare; leave it out or give another baseline")


def abs_run_dir(base: str, p: str) -> str:
    """Run directories are recorded absolute; an older record's relative one is tried beside the record, then
    from the current directory."""
    if os.path.isabs(p):
        return p
    beside = os.path.join(base, p)
    return beside if os.path.exists(beside) else os.path.abspath(p)


def compare_recorded(plan, s: GateSettings, done: dict[str, list[dict]], doc: dict) -> dict:
    """Every experiment's candidate runs against its recorded baseline runs, side against side, and the decision."""
    figs = []
    for e in plan.suite.entries:
        a_dirs = plan.baseline_runs.get(e.name) or []
        b_dirs = [r["run_dir"] for r in done[e.name]]
        a = Side.read(a_dirs, [read_report(d) for d in a_dirs])
        b = Side.read(b_dirs, [read_report(d) for d in b_dirs])
        figs += guard_sides(e.name, a, b, experiment_figures(e.name, a, b, s), s, doc)
        figs.append(aborted_figure(e.name, [read_report(d).get("exit_code") for d in a_dirs],
                                   [r["exit_code"] for r in done[e.name]]))
        dropped = a.dropped() + b.dropped()
        if dropped:
            doc.setdefault("not_compared", []).append(f"{e.name}: {', '.join(sorted(set(dropped)))} (not in every "
                                                      f"run: an aborted run ends early)")
    return decide(C.compare_figures([settle_empty(f) for f in figs], s.confidence), s, plan, doc["runs"])


def guard_sides(exp: str, a: Side, b: Side, figs: list[dict], s: GateSettings, doc: dict) -> list[dict]:
    """Recorded baseline runs: where the two sides' hosts differ in a phase (the mean of others' CPU over each
    side's runs), that phase's latency and recovery-time figures are not judged."""
    def mean_host(side: Side, phase: str | None):
        got = [load_summary(r) if phase is None else phase_summary(r, phase) for r in side.reports]
        if not got or any(h is None or h.others is None for h in got):
            return None
        return HostSummary(sum(h.samples for h in got), got[0].ncpu, sum(h.others for h in got) / len(got),
                           max(h.others_max or 0 for h in got))

    if mean_host(a, None) is None or mean_host(b, None) is None:
        doc.setdefault("notes", []).append(f"{exp}: the host of the recorded baseline or of the candidate's runs "
                                           f"was not measured (runs recorded before llm-chaos measured it): "
                                           f"not guarded")
        return figs
    out = []
    for f in figs:
        if f.get("kind") in ("latency", "value") and f["verdict"] != C.NOT_JUDGED:
            why = differs(mean_host(a, f["phase"]), mean_host(b, f["phase"]), s.host_bound)
            if why:
                f = {**f, "verdict": C.NOT_JUDGED, "p_value": None, "host": True,
                     "why": f"the host differed between the sides in {f['phase']}: {why}"}
        out.append(f)
    return out


def aborted_figure(exp: str, a_codes: list, b_codes: list) -> dict:
    """Recorded baselines: a candidate that trips abort_when more often than the baseline did is a regression,
    whatever its other figures say (they end early, and phases it never reached are not compared)."""
    ka, kb = sum(c == ABORTED for c in a_codes), sum(c == ABORTED for c in b_codes)
    fig = {"figure": f"{exp} · runs aborted by abort_when", "kind": "count", "experiment": exp, "phase": "run",
           "metric": "aborted runs", "a": {"value": ka, "n": len(a_codes)}, "b": {"value": kb, "n": len(b_codes)},
           "p_value": None}
    if kb and kb / max(1, len(b_codes)) > ka / max(1, len(a_codes)):
        return {**fig, "verdict": C.WORSE, "why": f"{kb} of {len(b_codes)} candidate runs aborted, {ka} of "
                                                  f"{len(a_codes)} baseline runs"}
    return {**fig, "verdict": C.SAME, "why": f"aborted: {ka} of {len(a_codes)} baseline, {kb} of {len(b_codes)} "
                                             f"candidate runs"}
