"""`chaos gate`: the pre-upgrade validation gate. The same suite runs against the baseline and the candidate; every
figure of every experiment is compared (chaos/gate/figures.py), all verdicts are corrected together (Holm), and
the gate fails only on a regression beyond the tolerance and beyond the noise.

Interleaved (--baseline-target): a b b a a b ... in one session. Both builds meet the same machine, in turn, so a
drift of the host (a neighbour, thermal state, a cache) lands on both sides alike instead of looking like a
regression; the alternating order cancels a steady trend as well. Against recorded baseline runs
(--baseline DIR), only the candidate runs now: quicker, but whatever changed on the host since is read as a
change of the build. docs/gate.md says more.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from ..suite.execute import ABORTED, FAILED, INCONCLUSIVE, INTERRUPTED, PASSED, Outcome, read_report, run_entry, write_state
from ..suite.model import Suite
from ..verify import compare as C
from .figures import Settings, Side, experiment_figures

PASS, REGRESSION, SETUP_ERROR, INCONCLUSIVE_EXIT = 0, 1, 2, 4
RAN = (PASSED, FAILED, ABORTED, INCONCLUSIVE)  # runs with records to compare


class GateError(Exception):
    pass


@dataclass(slots=True)
class Plan:
    suite: Suite
    out_dir: str
    candidate: str
    baseline_target: str | None = None  # interleaved
    baseline_runs: dict[str, list[str]] = field(default_factory=dict)  # entry name -> recorded run dirs
    repeat: int = 3

    def __post_init__(self):
        if self.repeat < 1 or self.repeat > 50:
            raise GateError("--repeat must be from 1 to 50")
        if (self.baseline_target is None) == (not self.baseline_runs):
            raise GateError("give either --baseline-target FILE (interleaved runs) or --baseline DIR (recorded runs)")


def order(repeat: int) -> list[str]:
    """a b, b a, a b, ...: each pair alternates which side goes first."""
    out = []
    for k in range(repeat):
        out += ["a", "b"] if k % 2 == 0 else ["b", "a"]
    return out


def recorded_runs(path: str, suite: Suite) -> dict[str, list[str]]:
    """The baseline runs in a gate's, a game day's or one run's directory, by suite entry name."""
    path = os.path.abspath(path)
    for name in ("gate.json", "gameday.json"):
        p = os.path.join(path, name)
        if os.path.exists(p):
            with open(p) as f:
                doc = json.load(f)
            found: dict[str, list[str]] = {}
            for run in doc.get("runs", []):
                # a gate's candidate runs (the build that passed) make the next gate's baseline
                if name == "gate.json" and run.get("side") != "b":
                    continue
                if run.get("exit_code") in RAN:
                    found.setdefault(run["name"], []).append(_abs(path, run["run_dir"]))
            missing = [e.name for e in suite.entries if e.name not in found]
            if missing:
                raise GateError(f"{path}: no finished baseline run of {', '.join(missing)}: the baseline must have "
                                f"run every experiment of the suite (or give --baseline-target)")
            return found
    if os.path.exists(os.path.join(path, "report.json")):
        rep = read_report(path)
        exp_name = (rep.get("experiment") or {}).get("name")
        for e in suite.entries:
            if exp_name in (e.name, os.path.splitext(os.path.basename(e.file))[0]):
                return {e.name: [path]}
        raise GateError(f"{path}: its experiment {exp_name!r} is not in the suite {suite.path}")
    raise GateError(f"{path}: not a run, game day or gate directory (no report.json, gameday.json or gate.json)")


def _abs(base: str, p: str) -> str:
    """Run directories are recorded absolute; an older record's relative one is tried beside the record, then
    from the current directory."""
    if os.path.isabs(p):
        return p
    beside = os.path.join(base, p)
    return beside if os.path.exists(beside) else os.path.abspath(p)


def run_gate(plan: Plan, settings: Settings, progress=print) -> dict:
    """Run what the plan needs, compare, decide. Returns the gate document (gate.json); KeyboardInterrupt after
    the running experiment rolled back, with what was done written down."""
    os.makedirs(plan.out_dir, exist_ok=True)
    doc = {"suite": plan.suite.name, "suite_file": plan.suite.path, "candidate": plan.candidate,
           "baseline": plan.baseline_target or {k: v for k, v in plan.baseline_runs.items()},
           "interleaved": plan.baseline_target is not None, "repeat": plan.repeat,
           "settings": {k: getattr(settings, k) for k in settings.__slots__}, "started": time.time(), "runs": []}
    sides: dict[str, dict[str, list[Outcome]]] = {e.name: {"a": [], "b": []} for e in plan.suite.entries}
    try:
        for e in plan.suite.entries:
            seq = order(plan.repeat) if plan.baseline_target else ["b"] * plan.repeat
            for k, side in enumerate(seq):
                idx = len(sides[e.name][side]) + 1
                target = plan.baseline_target if side == "a" else plan.candidate
                run_dir = os.path.join(plan.out_dir, "runs", e.name, f"{side}-{idx}")
                progress(f"[{e.name} {k + 1}/{len(seq)}] {'baseline' if side == 'a' else 'candidate'} run {idx}")
                out = run_entry(e, run_dir, target=target, progress=progress)
                sides[e.name][side].append(out)
                doc["runs"].append({**out.to_dict(), "side": side})
                _write(plan.out_dir, doc)
                if out.exit_code == INTERRUPTED or out.interrupted:
                    raise KeyboardInterrupt
                if out.exit_code not in RAN:  # a setup error, or the run crashed: nothing to compare
                    doc.update(decide_setup(out))
                    return _finish(plan.out_dir, doc)
    except KeyboardInterrupt:
        doc.update(exit_code=INTERRUPTED, verdict="interrupted",
                   reason="interrupted: the runs done are listed; the gate did not decide")
        _finish(plan.out_dir, doc)
        raise
    figs = []
    for e in plan.suite.entries:
        if plan.baseline_target:
            a_dirs = [o.run_dir for o in sides[e.name]["a"]]
        else:
            a_dirs = plan.baseline_runs.get(e.name) or []
        b_dirs = [o.run_dir for o in sides[e.name]["b"]]
        a = Side.read(a_dirs, [read_report(d) for d in a_dirs])
        b = Side.read(b_dirs, [read_report(d) for d in b_dirs])
        figs += experiment_figures(e.name, a, b, settings) + [aborted_figure(e.name, sides[e.name], a_dirs)]
        dropped = a.dropped() + b.dropped()
        if dropped:
            doc.setdefault("not_compared", []).append(f"{e.name}: {', '.join(sorted(set(dropped)))} (not in every "
                                                      f"run: an aborted run ends early)")
    doc.update(decide(figs, settings, plan))
    return _finish(plan.out_dir, doc)


def aborted_figure(exp: str, runs: dict[str, list[Outcome]], a_dirs: list[str]) -> dict:
    """Runs abort_when stopped: a candidate that trips it where the baseline did not is a regression, whatever
    its other figures say (they end early, and phases it never reached are not compared)."""
    a_codes = [o.exit_code for o in runs["a"]] or [read_report(d).get("exit_code") for d in a_dirs]
    b_codes = [o.exit_code for o in runs["b"]]
    ka, kb = sum(c == ABORTED for c in a_codes), sum(c == ABORTED for c in b_codes)
    fig = {"figure": f"{exp} · runs aborted by abort_when", "kind": "count", "experiment": exp, "phase": "run",
           "metric": "aborted runs", "a": {"value": ka, "n": len(a_codes)}, "b": {"value": kb, "n": len(b_codes)},
           "p_value": None}
    if kb and kb / max(1, len(b_codes)) > ka / max(1, len(a_codes)):
        return {**fig, "verdict": C.WORSE, "why": f"{kb} of {len(b_codes)} candidate runs aborted, {ka} of "
                                                  f"{len(a_codes)} baseline runs"}
    return {**fig, "verdict": C.SAME, "why": f"aborted: {ka} of {len(a_codes)} baseline, {kb} of {len(b_codes)} "
                                             f"candidate runs"}


def decide_setup(out: Outcome) -> dict:
    return {"exit_code": SETUP_ERROR, "verdict": "setup error",
            "reason": f"{out.name}: a run could not start ({out.error or 'see ' + out.run_dir + '.log'}); "
                      f"nothing was compared", "figures": []}


def _settle(f: dict) -> dict:
    """Nothing on either side (no failed request in both) is no change, not a figure left unjudged."""
    if f["verdict"] == C.NOT_JUDGED and f.get("kind") == "rate" and "neither run has events" in f.get("why", ""):
        return {**f, "verdict": C.SAME, "why": "no failed request on either side"}
    return f


def decide(figs: list[dict], s: Settings, plan: Plan) -> dict:
    figs = C.compare_figures([_settle(f) for f in figs], s.confidence)
    worse = [f for f in figs if f["verdict"] == C.WORSE]
    judged = [f for f in figs if f["verdict"] != C.NOT_JUDGED]
    short = [f for f in figs if f["verdict"] == C.NOT_JUDGED and f.get("needs_runs")]
    score = round(100 * sum(f["verdict"] != C.WORSE for f in judged) / len(judged), 1) if judged else None
    base = {"figures": figs, "score": score, "regressed": [f["figure"] for f in worse],
            "judged": len(judged), "not_judged": len(figs) - len(judged)}
    if worse:
        return {**base, "exit_code": REGRESSION, "verdict": "regression",
                "reason": f"{len(worse)} figure(s) worse beyond the tolerance and the noise"}
    if not judged or short:
        need = max([f["needs_runs"] for f in short] or [plan.repeat + 1])
        baseline_short = not plan.baseline_target and any(f.get("short_side") == "a" for f in short)
        if baseline_short:
            how = (f"the recorded baseline has too few: record at least {need} baseline runs of each experiment "
                   f"(a game day or gate with --repeat {need}), or give --baseline-target")
        else:
            need = max(need, plan.repeat + 1)
            how = f"{need - plan.repeat} more run(s) a side (--repeat {need}), or fewer percentiles (--percentiles)"
        return {**base, "exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "needs_runs": need,
                "reason": f"no regression found, but {len(short)} figure(s) had too few samples to judge: {how}"}
    return {**base, "exit_code": PASS, "verdict": "pass",
            "reason": f"no figure worse beyond the tolerance and the noise ({len(judged)} judged)"}


def _write(out_dir: str, doc: dict) -> None:
    write_state(os.path.join(out_dir, "gate.json"), doc)


def _finish(out_dir: str, doc: dict) -> dict:
    from .report import junit, markdown

    doc["finished"] = time.time()
    _write(out_dir, doc)
    with open(os.path.join(out_dir, "gate.md"), "w") as f:
        f.write(markdown(doc))
    with open(os.path.join(out_dir, "junit.xml"), "w") as f:
        f.write(junit(doc))
    return doc
