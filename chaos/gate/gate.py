"""`chaos gate`: the pre-upgrade validation gate. The same suite runs against the baseline and the candidate;
every figure of every experiment is compared, and the gate fails only on a regression beyond the tolerance and
beyond the noise, that the host cannot explain.

Interleaved (--baseline-target): n pairs of runs, each pair's order (a b or b a) drawn by a fair coin, compared
pair by pair (chaos/gate/pairs.py, chaos/verify/paired.py): a neighbour that comes and goes lands on both runs of
most pairs, and where it lands on one run only its sign is the coin's, so it cannot read as a build change beyond
alpha; a pair whose two runs saw a different host is left out of the latency figures (the guard). Against recorded
baseline runs (--baseline DIR), only the candidate runs now, compared side against side (chaos/gate/figures.py),
the two sides' hosts guarded alike (chaos/gate/recorded.py). Sequential (--max-pairs): pairs until every figure
is decided (chaos/gate/looks.py). The decision and its reason: chaos/gate/verdict.py. docs/gate.md says more.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field

from ..host import load_summary
from ..suite.execute import INTERRUPTED, run_entry, write_state
from ..suite.model import Suite
from . import pairs as P
from .figures import GateSettings
from .judge import judge
from .looks import decide_sequential, look_at, read_pairs, run_sequential
from .recorded import abs_run_dir, compare_recorded
from .sequential import Design
from .verdict import RAN, SETUP_ERROR, GateError, decide, decide_setup

MAX_PAIRS = 50


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
            return _finish(plan.out_dir, run_sequential(plan, settings, doc, done, orders, run, progress,
                                                        lambda: _write(plan.out_dir, doc)))
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
        run_dir = abs_run_dir(gate_dir, r["run_dir"]) if os.path.exists(abs_run_dir(gate_dir, r["run_dir"])) else here
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
        look_at(plan, settings, done, decided, look, pairs, doc)
    doc.update(decide_sequential(plan, settings, done, decided, doc))
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
            pairs = read_pairs(done[e.name])
            figs += P.experiment_figures(e.name, pairs, s)
            if pairs and not all(p.measured() for p in pairs):
                doc.setdefault("notes", []).append(f"{e.name}: the host was not measured in every run: those "
                                                   f"pairs are not guarded")
        return decide(judge(figs, s.confidence, plan.seed, s.host_bound), s, plan, doc["runs"])
    return compare_recorded(plan, s, done, doc)


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
