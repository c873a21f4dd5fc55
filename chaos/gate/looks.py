"""The sequential gate's looks (`chaos gate --max-pairs`, chaos/gate/sequential.py has the design): rounds of
pairs, every figure judged at each look, an experiment whose figures are all decided running no more pairs; and
the pairs of a gate's runs, read from their folders."""

from __future__ import annotations

from ..suite.execute import read_report
from ..verify import compare as C
from . import pairs as P
from .judge import judge
from .sequential import settle, update
from .verdict import PASS, GateError, decide


def run_sequential(plan, s, doc: dict, done: dict, orders: list[str], run, progress, write) -> dict:
    """Rounds of pairs, one pair of each experiment still open a round; at each look every figure is judged
    (chaos/gate/sequential.py) and an experiment whose figures are all decided runs no more pairs. Returns the
    gate document, decided (or with the setup error that ended it); write() saves it as it goes."""
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
                    return doc
        look = design.look_at(pair)
        if look is None:
            continue
        still = look_at(plan, s, done, decided, look, pair, doc)
        worse, names = doc["sequential"]["done"][-1]["worse"], [f["figure"] for f in still]
        progress(f"look {look + 1}/{len(design.looks)} at {pair} pairs: {len(decided)} figure(s) decided ({worse} "
                 f"worse), {len(still)} open" + (f": {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
                                                  if names else ""))
        running = [e for e in running if e.name in {f["experiment"] for f in still}]
        write()
        if worse:  # the verdict is made: a regression, called at the look's strict threshold
            progress("a figure is worse: the gate stops here (the figures still open are listed as such)")
            break
        if not running:
            break
    progress("comparing ...")
    doc.update(decide_sequential(plan, s, done, decided, doc))
    return doc


def figures_upto(plan, s, done: dict, upto: int) -> list[dict]:
    figs = []
    for e in plan.suite.entries:
        figs += P.experiment_figures(e.name, read_pairs([r for r in done[e.name] if r["pair"] <= upto]), s)
    return figs


def look_at(plan, s, done: dict, decided: dict, look: int, pairs: int, doc: dict) -> list[dict]:
    """One look: every figure judged on the pairs so far, the decided ones added to decided, the look written in
    gate.json's sequential.done. Returns the figures still open."""
    judged = judge(figures_upto(plan, s, done, pairs), 1 - plan.design.alpha_at(look), plan.seed, s.host_bound)
    still = update(decided, judged, plan.design, look, pairs, plan.seed)
    doc["sequential"]["done"].append({"pairs": pairs, "decided": len(decided), "open": [f["figure"] for f in still],
                                      "worse": sum(d["verdict"] == C.WORSE for d in decided.values())})
    return still


def decide_sequential(plan, s, done: dict, decided: dict, doc: dict) -> dict:
    """The figures at the last look, each decided one with the verdict of the look that decided it."""
    last = max(r["pair"] for rows in done.values() for r in rows)
    look = plan.design.look_at(last)
    alpha = plan.design.alpha_at(look if look is not None else len(plan.design.looks) - 1)
    figs = settle(judge(figures_upto(plan, s, done, last), 1 - alpha, plan.seed, s.host_bound), decided)
    ran = {e.name: max((r["pair"] for r in done[e.name]), default=0) for e in plan.suite.entries}
    doc["sequential"].update(pairs_run=ran, runs=2 * sum(ran.values()),
                             open=[f["figure"] for f in figs if not f["decided"] and f.get("kind") != "aborted"])
    out = decide(figs, s, plan, doc["runs"])
    if out["exit_code"] == PASS and doc["sequential"]["open"]:
        n = len(doc["sequential"]["open"])
        out["reason"] += (f"; {n} figure(s) still open at {plan.design.max_pairs} pairs (neither worse nor shown "
                          f"within the tolerance: more --max-pairs would decide them)")
    return out


def read_pairs(rows: list[dict]) -> list[P.Pair]:
    by_pair: dict[int, dict] = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {"order": r["order"]})[r["side"]] = r["run_dir"]
    out = []
    for n, d in sorted(by_pair.items()):
        if "a" in d and "b" in d:
            out.append(P.Pair(n, d["order"], read_run(d["a"]), read_run(d["b"])))
    return out


def read_run(run_dir: str) -> P.Run:
    """A run of a pair, which must have its report: a gate never judges runs it cannot read."""
    report = read_report(run_dir)
    if not report:
        raise GateError(f"{run_dir}: no readable report.json: the run's folder was moved or removed since the gate "
                        f"ran (run directories are recorded absolute)")
    return P.Run.read(run_dir, report)
