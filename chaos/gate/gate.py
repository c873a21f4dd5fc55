"""`chaos gate`: the pre-upgrade validation gate. The same suite runs against the baseline and the candidate;
every figure of every experiment is compared, and the gate fails only on a regression beyond the tolerance and
beyond the noise, that the host cannot explain.

Interleaved (--baseline-target): n pairs of runs, each pair's order (a b or b a) drawn by a fair coin, compared
pair by pair (chaos/gate/pairs.py, chaos/verify/paired.py): a neighbour that comes and goes lands on both runs of
most pairs, and where it lands on one run only its sign is the coin's, so it cannot read as a build change beyond
alpha; a pair whose two runs saw a different host is left out of the latency figures (the guard). Against recorded
baseline runs (--baseline DIR), only the candidate runs now, compared side against side (chaos/gate/figures.py),
the two sides' hosts guarded alike. docs/gate.md says more.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field

from ..errors import InputError
from ..host import HostSummary, differs, load_summary, phase_summary
from ..rundir.files import REPORT_JSON
from ..suite.execute import ABORTED, FAILED, INCONCLUSIVE, INTERRUPTED, PASSED, Outcome, read_report, run_entry, write_state
from ..suite.model import Suite
from ..verify import compare as C
from ..verify.paired import min_pairs
from . import pairs as P
from .judge import judge
from .figures import GateSettings, Side, experiment_figures
from .sequential import Design, settle, update

PASS, REGRESSION, SETUP_ERROR, INCONCLUSIVE_EXIT = 0, 1, 2, 4
RAN = (PASSED, FAILED, ABORTED, INCONCLUSIVE)  # runs with records to compare
MAX_PAIRS = 50


class GateError(InputError):
    pass


@dataclass(slots=True)
class Plan:
    suite: Suite
    out_dir: str
    candidate: str
    baseline_target: str | None = None  # interleaved
    baseline_runs: dict[str, list[str]] = field(default_factory=dict)  # entry name -> recorded run dirs
    pairs: int = 7  # interleaved: pairs of runs; recorded: candidate runs
    seed: int | None = None  # the coins of the pairs' orders; None: drawn and written down
    aa: bool = False  # the candidate is the baseline: an A/A control
    design: Design | None = None  # sequential (--max-pairs): pairs until every figure is decided

    def __post_init__(self):
        if self.pairs < 1 or self.pairs > MAX_PAIRS:
            raise GateError(f"--pairs must be from 1 to {MAX_PAIRS}")
        if self.design is not None:
            if self.baseline_target is None:
                raise GateError("--max-pairs runs pairs until the figures are decided: give --baseline-target FILE "
                                "(recorded baseline runs cannot be paired)")
            if self.design.max_pairs > MAX_PAIRS:
                raise GateError(f"--max-pairs must be at most {MAX_PAIRS}")
            self.pairs = self.design.max_pairs
        if (self.baseline_target is None) == (not self.baseline_runs):
            raise GateError("give either --baseline-target FILE (interleaved runs) or --baseline DIR (recorded runs)")
        if self.seed is None:
            self.seed = secrets.randbelow(2 ** 31)

    @property
    def interleaved(self) -> bool:
        return self.baseline_target is not None

    @property
    def pairs_option(self) -> str:
        """The option that gives more pairs: what a message asking for more names."""
        return "--max-pairs" if self.design is not None else "--pairs"


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
                    found.setdefault(run["name"], []).append(_abs(path, run["run_dir"]))
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


def _abs(base: str, p: str) -> str:
    """Run directories are recorded absolute; an older record's relative one is tried beside the record, then
    from the current directory."""
    if os.path.isabs(p):
        return p
    beside = os.path.join(base, p)
    return beside if os.path.exists(beside) else os.path.abspath(p)


def run_gate(plan: Plan, settings: GateSettings, progress=print) -> dict:
    """Run what the plan needs, compare, decide. Returns the gate document (gate.json); KeyboardInterrupt after
    the running experiment rolled back, with what was done written down."""
    os.makedirs(plan.out_dir, exist_ok=True)
    orders = P.draw_orders(plan.pairs, plan.seed) if plan.interleaved else []
    doc = {"suite": plan.suite.name, "suite_file": plan.suite.path, "candidate": plan.candidate,
           "baseline": plan.baseline_target or {k: v for k, v in plan.baseline_runs.items()},
           "interleaved": plan.interleaved, "aa": plan.aa, "pairs": plan.pairs, "seed": plan.seed, "orders": orders,
           "settings": {k: getattr(settings, k) for k in settings.__slots__}, "started": time.time(), "runs": []}
    done: dict[str, list[dict]] = {e.name: [] for e in plan.suite.entries}

    def run(e, pair: int, o: str | None, side: str, what: str) -> bool:
        """One run, recorded in done and gate.json; False: a setup error ended the gate."""
        target = plan.baseline_target if side == "a" else plan.candidate
        progress(f"[{what}] {'baseline' if side == 'a' else 'candidate'}")
        out = run_entry(e, os.path.join(plan.out_dir, "runs", e.name, f"{side}-{pair}"), target=target,
                        progress=progress)
        host = load_summary(out.report)
        row = {**out.to_dict(), "side": side, "pair": pair, "order": o, "host": host.to_dict() if host else None}
        done[e.name].append(row)
        doc["runs"].append(row)
        if host:
            progress(f"  host: {host.text()}")
        _write(plan.out_dir, doc)
        if out.exit_code == INTERRUPTED or out.interrupted:
            raise KeyboardInterrupt
        if out.exit_code not in RAN:  # a setup error, or the run crashed: nothing to compare
            doc.update(decide_setup(out))
            return False
        return True

    try:
        if plan.design is not None:
            return _sequential(plan, settings, doc, done, orders, run, progress)
        for e in plan.suite.entries:
            seq = [(i + 1, o, side) for i, o in enumerate(orders) for side in o] if plan.interleaved \
                else [(i + 1, None, "b") for i in range(plan.pairs)]
            for k, (pair, o, side) in enumerate(seq):
                what = f"pair {pair}/{plan.pairs} {o}" if o else f"run {pair}/{plan.pairs}"
                if not run(e, pair, o, side, f"{e.name} {k + 1}/{len(seq)}, {what}"):
                    return _finish(plan.out_dir, doc)
    except KeyboardInterrupt:
        doc.update(exit_code=INTERRUPTED, verdict="interrupted",
                   reason="interrupted: the runs done are listed; the gate did not decide")
        _finish(plan.out_dir, doc)
        raise
    progress("comparing ...")
    doc.update(compare(plan, settings, done, doc))
    return _finish(plan.out_dir, doc)


def _sequential(plan: Plan, s: GateSettings, doc: dict, done: dict, orders: list[str], run, progress) -> dict:
    """Rounds of pairs, one pair of each experiment still open a round; at each look every figure is judged
    (chaos/gate/sequential.py) and an experiment whose figures are all decided runs no more pairs."""
    design = plan.design
    doc["sequential"] = {"looks": list(design.looks), "alpha": design.alpha, "beta": design.beta,
                         "alpha_per_look": design.alpha_at(0), "beta_per_look": design.beta_at(0), "done": []}
    decided: dict[str, dict] = {}
    running = [e for e in plan.suite.entries]
    for pair in range(1, design.max_pairs + 1):
        o = orders[pair - 1]
        for e in running:
            for side in o:
                what = f"{e.name}, pair {pair} of at most {design.max_pairs} {o}"
                if not run(e, pair, o, side, what):
                    return _finish(plan.out_dir, doc)
        look = design.look_at(pair)
        if look is None:
            continue
        still = _look(plan, s, done, decided, look, pair, doc)
        worse, names = doc["sequential"]["done"][-1]["worse"], [f["figure"] for f in still]
        progress(f"look {look + 1}/{len(design.looks)} at {pair} pairs: {len(decided)} figure(s) decided ({worse} "
                 f"worse), {len(still)} open" + (f": {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
                                                  if names else ""))
        running = [e for e in running if e.name in {f["experiment"] for f in still}]
        _write(plan.out_dir, doc)
        if worse:  # the verdict is made: a regression, called at the look's strict threshold
            progress("a figure is worse: the gate stops here (the figures still open are listed as such)")
            break
        if not running:
            break
    progress("comparing ...")
    doc.update(_decide_sequential(plan, s, done, decided, doc))
    return _finish(plan.out_dir, doc)


def _figures(plan: Plan, s: GateSettings, done: dict, upto: int) -> list[dict]:
    figs = []
    for e in plan.suite.entries:
        figs += P.experiment_figures(e.name, _pairs([r for r in done[e.name] if r["pair"] <= upto]), s)
    return figs


def _look(plan: Plan, s: GateSettings, done: dict, decided: dict, look: int, pairs: int, doc: dict) -> list[dict]:
    """One look: every figure judged on the pairs so far, the decided ones added to decided, the look written in
    gate.json's sequential.done. Returns the figures still open."""
    judged = judge(_figures(plan, s, done, pairs), 1 - plan.design.alpha_at(look), plan.seed, s.host_bound)
    still = update(decided, judged, plan.design, look, pairs, plan.seed)
    doc["sequential"]["done"].append({"pairs": pairs, "decided": len(decided), "open": [f["figure"] for f in still],
                                      "worse": sum(d["verdict"] == C.WORSE for d in decided.values())})
    return still


def _decide_sequential(plan: Plan, s: GateSettings, done: dict, decided: dict, doc: dict) -> dict:
    """The figures at the last look, each decided one with the verdict of the look that decided it."""
    last = max(r["pair"] for rows in done.values() for r in rows)
    look = plan.design.look_at(last)
    alpha = plan.design.alpha_at(look if look is not None else len(plan.design.looks) - 1)
    figs = settle(judge(_figures(plan, s, done, last), 1 - alpha, plan.seed, s.host_bound), decided)
    ran = {e.name: max((r["pair"] for r in done[e.name]), default=0) for e in plan.suite.entries}
    doc["sequential"].update(pairs_run=ran, runs=2 * sum(ran.values()),
                             open=[f["figure"] for f in figs if not f["decided"] and f.get("kind") != "aborted"])
    out = decide(figs, s, plan, doc["runs"])
    if out["exit_code"] == PASS and doc["sequential"]["open"]:
        n = len(doc["sequential"]["open"])
        out["reason"] += (f"; {n} figure(s) still open at {plan.design.max_pairs} pairs (neither worse nor shown "
                          f"within the tolerance: more --max-pairs would decide them)")
    return out


def rejudge(gate_dir: str, settings: GateSettings, out_dir: str) -> dict:
    """An interleaved gate's runs judged again, with other settings (a tolerance, a host bound), without running
    anything: gate.json, gate.md and junit.xml written into out_dir. The runs stay where they are."""
    try:
        with open(os.path.join(gate_dir, "gate.json")) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:
        raise GateError(f"{gate_dir}: no readable gate.json ({e}): give a directory `chaos gate` wrote") from None
    if not old.get("interleaved") or not old.get("orders"):
        raise GateError(f"{gate_dir}: not a gate of pairs (an interleaved gate of this version): nothing to rejudge")
    if old.get("exit_code") in (SETUP_ERROR, INTERRUPTED):
        raise GateError(f"{gate_dir}: that gate did not finish its runs ({old.get('verdict')})")
    done: dict[str, list[dict]] = {}
    for r in old["runs"]:
        here = os.path.join(gate_dir, "runs", r["name"], f"{r['side']}-{r['pair']}")
        # a gate folder moved or copied (a CI artifact) is judged where it is now
        run_dir = _abs(gate_dir, r["run_dir"]) if os.path.exists(_abs(gate_dir, r["run_dir"])) else here
        done.setdefault(r["name"], []).append({**r, "run_dir": os.path.abspath(run_dir)})
    entries = [_Entry(name) for name in done]
    seq = old.get("sequential")
    design = Design.plan(settings.confidence, len(old["orders"]), 1 - seq["beta"]) if seq else None
    plan = Plan(_Suite(old["suite"], old.get("suite_file"), entries), out_dir, old["candidate"], old["baseline"],
                pairs=old["pairs"], seed=old["seed"], aa=old.get("aa", False), design=design)
    doc = {k: v for k, v in old.items() if k not in ("figures", "notes", "not_compared")}
    doc.update(settings={k: getattr(settings, k) for k in settings.__slots__}, rejudged_from=os.path.abspath(gate_dir),
               runs=[r for rows in done.values() for r in rows])
    os.makedirs(out_dir, exist_ok=True)
    if design is None:
        doc.update(compare(plan, settings, done, doc))
        return _finish(out_dir, doc)
    # the looks again, in order, on the pairs each had: the same procedure, with these settings
    decided: dict[str, dict] = {}
    last = max(r["pair"] for r in doc["runs"])
    doc["sequential"] = {**seq, "looks": list(design.looks), "alpha": design.alpha, "alpha_per_look":
                         design.alpha_at(0), "done": []}
    for look, pairs in enumerate(design.looks):
        if pairs > last:
            break
        _look(plan, settings, done, decided, look, pairs, doc)
    doc.update(_decide_sequential(plan, settings, done, decided, doc))
    return _finish(out_dir, doc)


@dataclass(slots=True)
class _Entry:
    name: str


@dataclass(slots=True)
class _Suite:
    name: str
    path: str | None
    entries: list


def compare(plan: Plan, s: GateSettings, done: dict[str, list[dict]], doc: dict) -> dict:
    """The figures of every experiment, judged, and the decision."""
    if plan.interleaved:
        figs = []
        for e in plan.suite.entries:
            pairs = _pairs(done[e.name])
            figs += P.experiment_figures(e.name, pairs, s)
            if pairs and not all(p.measured() for p in pairs):
                doc.setdefault("notes", []).append(f"{e.name}: the host was not measured in every run: those "
                                                   f"pairs are not guarded")
        return decide(judge(figs, s.confidence, plan.seed, s.host_bound), s, plan, doc["runs"])
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
    return decide(C.compare_figures([_settle(f) for f in figs], s.confidence), s, plan, doc["runs"])


def _pairs(rows: list[dict]) -> list[P.Pair]:
    by_pair: dict[int, dict] = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {"order": r["order"]})[r["side"]] = r["run_dir"]
    out = []
    for n, d in sorted(by_pair.items()):
        if "a" in d and "b" in d:
            out.append(P.Pair(n, d["order"], _run(d["a"]), _run(d["b"])))
    return out


def _run(run_dir: str) -> P.Run:
    """A run of a pair, which must have its report: a gate never judges runs it cannot read."""
    report = read_report(run_dir)
    if not report:
        raise GateError(f"{run_dir}: no readable report.json: the run's folder was moved or removed since the gate "
                        f"ran (run directories are recorded absolute)")
    return P.Run.read(run_dir, report)


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


def decide_setup(out: Outcome) -> dict:
    return {"exit_code": SETUP_ERROR, "verdict": "setup error",
            "reason": f"{out.name}: a run could not start ({out.error or 'see ' + out.run_dir + '.log'}); "
                      f"nothing was compared", "figures": []}


def _settle(f: dict) -> dict:
    """Nothing on either side (no failed request in both) is no change, not a figure left unjudged."""
    if f["verdict"] == C.NOT_JUDGED and f.get("kind") == "rate" and "neither run has events" in f.get("why", ""):
        return {**f, "verdict": C.SAME, "why": "no failed request on either side"}
    return f


def decide(figs: list[dict], s: GateSettings, plan: Plan, runs: list[dict] = ()) -> dict:
    """The gate's decision from its judged figures: 1 for a regression the host cannot explain, 4 where figures
    could not be judged (the host differed, or too few pairs or samples), else 0."""
    worse = [f for f in figs if f["verdict"] == C.WORSE]
    judged = [f for f in figs if f["verdict"] != C.NOT_JUDGED]
    held = [f for f in figs if f["verdict"] == C.NOT_JUDGED and f.get("host")]
    short = [f for f in figs if f["verdict"] == C.NOT_JUDGED and not f.get("host")
             and (f.get("needs_runs") or f.get("needs_pairs"))]
    score = round(100 * sum(f["verdict"] != C.WORSE for f in judged) / len(judged), 1) if judged else None
    base = {"figures": figs, "score": score, "regressed": [f["figure"] for f in worse],
            "judged": len(judged), "not_judged": len(figs) - len(judged)}
    if worse:
        return {**base, "exit_code": REGRESSION, "verdict": "regression",
                "reason": f"{len(worse)} figure(s) worse beyond the tolerance and the noise"
                          + (", on pairs the host cannot explain" if plan.interleaved else "")}
    if held:
        more = plan.pairs + max(len((f.get("excluded") or {}).get("host") or {}) for f in held)
        return {**base, "exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "host_differed": True,
                "needs_pairs": more,
                "reason": f"no regression found, but the host differed between the runs compared, so "
                          f"{len(held)} latency or recovery-time figure(s) were not judged on that evidence "
                          f"({host_text(held, runs)}). Rerun when the runner is quieter, give more pairs "
                          f"({plan.pairs_option} {more}) so that enough of them see the same host, or move to a quieter "
                          f"runner; `chaos gate --aa` measures a runner"}
    if not judged or short:
        return {**base, **_short(short, plan)}
    return {**base, "exit_code": PASS, "verdict": "pass",
            "reason": f"no figure worse beyond the tolerance and the noise ({len(judged)} judged)"}


def host_text(held: list[dict], runs: list[dict]) -> str:
    """The pairs (or sides) whose hosts differed, with the runs and their figures."""
    pairs = sorted({(f["experiment"], n) for f in held for n in ((f.get("excluded") or {}).get("host") or {})})
    if not pairs:  # recorded baseline: the sides differed
        return "; ".join(sorted({f["why"] for f in held}))[:600]
    parts = []
    for exp, n in pairs[:6]:
        rows = {r["side"]: r for r in runs if r["name"] == exp and r.get("pair") == n}
        parts.append(f"{exp} pair {n}: {_run_host(rows, 'a')}, {_run_host(rows, 'b')}")
    return "; ".join(parts) + (f"; and {len(pairs) - 6} more" if len(pairs) > 6 else "")


def _run_host(rows: dict, side: str) -> str:
    """'baseline a-2 others 0.02 cores'"""
    row = rows.get(side) or {}
    others = (row.get("host") or {}).get("others")
    name = os.path.basename(row["run_dir"]) if row else "?"
    return (f"{'baseline' if side == 'a' else 'candidate'} {name}"
            + (f" others {others:.2f} cores" if others is not None else ""))


def _short(short: list[dict], plan: Plan) -> dict:
    if plan.interleaved:
        need = max([f.get("needs_pairs") or 0 for f in short] + [plan.pairs + 1, min_pairs(0.95)])
        return {"exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "needs_pairs": need,
                "reason": f"no regression found, but {len(short)} figure(s) could not be judged: "
                          f"{(short[0]['why'] if short else 'nothing judged')}; give {plan.pairs_option} {need}, longer runs "
                          f"or fewer percentiles (--percentiles)"}
    need = max([f.get("needs_runs") or 0 for f in short] or [plan.pairs + 1])
    if any(f.get("short_side") == "a" for f in short):
        how = (f"the recorded baseline has too few: record at least {need} baseline runs of each experiment "
               f"(a game day, or a gate with --pairs {need}), or give --baseline-target")
    else:
        need = max(need, plan.pairs + 1)
        how = f"{need - plan.pairs} more candidate run(s) (--pairs {need}), or fewer percentiles (--percentiles)"
    return {"exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "needs_runs": need,
            "reason": f"no regression found, but {len(short)} figure(s) had too few samples to judge: {how}"}


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
