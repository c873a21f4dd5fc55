"""The gate's paired figures and its decision, on synthetic runs with a known truth (seeded): records and reports
built here, every pair's host stated. No process runs; tests/gate/test_gate_run.py runs real gates.

What must hold (issue 41):
- a no-change gate passes, also with a neighbour in some pairs' runs;
- a pair whose runs saw a different host is left out of latency figures when enough pairs are left, and when too
  few are left a "worse" found on it is not called: exit 4, naming the pairs, their runs and host figures;
- a slower build is a regression (exit 1) on pairs whose hosts agreed;
- an error regression is called whatever the host (an HTTP 500 is never the host's doing), while timeouts in a
  pair whose host differed are set aside;
- a figure on fewer than 5 pairs is not judged and says how many it needs.
"""

import math

import numpy as np
import pytest

from chaos.gate.figures import GateSettings
from chaos.gate.gate import Plan
from chaos.gate.verdict import INCONCLUSIVE_EXIT, PASS, REGRESSION, decide
from chaos.gate.judge import judge
from chaos.gate.pairs import Pair, Run, experiment_figures, slow_host_failure
from chaos.records import RequestRecord
from chaos.verify import compare as C

T0 = 1_800_000_000.0
PHASES = (("steady state", "steady", 0.0, 10.0), ("kill-r1", "fault", 10.0, 20.0),
          ("after recovery", "after", 20.0, 30.0))
QUIET, BUSY = 0.02, 1.0


def _host(others: dict[str, float]) -> dict:
    def summ(o):
        return {"samples": 10, "ncpu": 2, "others": o, "others_max": o + 0.05, "own": 1.5, "steal": 0.0,
                "load1": 2.0, "psi_cpu": 0.3, "psi_io": 0.0, "psi_mem": 0.0}
    return {"load": summ(float(np.mean(list(others.values()))) if others else QUIET),
            "phases": {name: summ(others.get(name, QUIET)) for name, *_ in PHASES}}


def make_run(rng, t0: float, slow: float = 1.0, errors: float = 0.0, timeouts: float = 0.0,
             others: dict[str, float] | None = None, restore: float = 4.0, exit_code: int = 0) -> Run:
    """30 s of load at 40 requests a second: E2E log-normal around 50 ms x slow (x1.6 more in a phase whose host
    is busy), a share failing with HTTP 500 and a share timing out in the fault's window."""
    others = others or {}
    recs = []
    for i, s in enumerate(np.sort(rng.uniform(0, 30, 1200))):
        phase = next(name for name, _, a, b in PHASES if a <= s < b)
        busy = 1.6 if others.get(phase, QUIET) > 0.5 else 1.0
        e2e = rng.lognormal(math.log(0.05 * slow * busy), 0.25)
        ttft = e2e * 0.2
        outcome, status = "ok", 200
        if phase == "kill-r1" and rng.random() < errors:
            outcome, status = "http_error", 500
        elif phase == "kill-r1" and rng.random() < timeouts:
            outcome, status = "timeout", None
        recs.append(RequestRecord(id=f"r{i}", case="chat", endpoint="chat", stream=True, t_sched=t0 + s,
                                  t_start=t0 + s, t_first=t0 + s + ttft if outcome == "ok" else None,
                                  t_end=t0 + s + e2e, status=status, outcome=outcome))
    failed = sum(r.outcome != "ok" for r in recs if 10 <= r.t_end - t0 < 20)
    report = {"exit_code": exit_code, "load_started": t0,
              "phases": [{"name": n, "kind": k, "start": t0 + a, "end": t0 + b} for n, k, a, b in PHASES],
              "recovery": {"faults": [{"fault": "kill-r1", "start": t0 + 10, "end": t0 + 20,
                                       "time_to_detect": {"value": 0.05 * slow},
                                       "time_to_failover": {"value": 0.3 * slow},
                                       "time_to_restore": {"value": restore * slow + rng.normal(0, 0.2)},
                                       "error_budget": {"failed_requests": failed}}]},
              "host": _host(others)}
    return Run(f"/runs/x-{t0}", report, recs)


def make_pairs(seed=1, n=7, slow=1.0, errors=0.0, timeouts=0.0, busy: dict | None = None, b_timeouts=None):
    """n pairs; busy: pair number -> (side, phases) whose host is busy in that run."""
    rng = np.random.default_rng(seed)
    busy = busy or {}
    out = []
    for k in range(1, n + 1):
        side, phases = busy.get(k, (None, ()))
        oth = {p: BUSY for p in phases}
        a = make_run(rng, T0 + 100 * k, others=oth if side == "a" else None)
        b = make_run(rng, T0 + 100 * k + 50, slow=slow, errors=errors,
                     timeouts=(b_timeouts or {}).get(k, timeouts), others=oth if side == "b" else None)
        out.append(Pair(k, "ab" if rng.random() < 0.5 else "ba", a, b))
    return out


S = GateSettings(percentiles=(50, 95))


def gate(pairs, settings=S, seed=0):
    figs = judge(experiment_figures("x", pairs, settings), settings.confidence, seed, settings.host_bound)
    plan = Plan(suite=None, out_dir="o", candidate="c", baseline_target="b", pairs=len(pairs), seed=seed)
    runs = [{"name": "x", "pair": p.number, "side": s, "run_dir": getattr(p, s).run_dir,
             "host": getattr(p, s).report["host"]["load"]} for p in pairs for s in "ab"]
    return decide(figs, settings, plan, runs)


def fig(doc, name):
    return next(f for f in doc["figures"] if f["figure"] == f"x · {name}")


def test_a_no_change_gate_passes_with_every_figure_judged():
    doc = gate(make_pairs())
    assert doc["exit_code"] == PASS, doc["regressed"]
    names = {f["figure"] for f in doc["figures"]}
    assert {"x · steady state E2E p50", "x · kill-r1 error rate", "x · kill-r1 time to restore",
            "x · kill-r1 failed requests per run", "x · run runs aborted by abort_when"} <= names
    f = fig(doc, "steady state E2E p50")
    assert f["verdict"] == C.SAME and f["judged_on"] == list(range(1, 8))
    assert 0.9 < f["ratio"]["value"] < 1.1 and 0 < f["ratio"]["low"] < 1 < f["ratio"]["high"]


def test_a_slower_build_is_a_regression_named_with_its_interval():
    doc = gate(make_pairs(slow=1.5))
    assert doc["exit_code"] == REGRESSION
    f = fig(doc, "steady state E2E p50")
    assert f["verdict"] == C.WORSE and f["p_value"] <= 0.05 and f["ratio"]["low"] > 1.3
    # recovery times scale too: restore 4 s -> 6 s, beyond the 0.5 s floor and 10 %
    assert fig(doc, "kill-r1 time to restore")["verdict"] == C.WORSE


def test_a_busy_pair_is_left_out_and_the_rest_decide():
    """Pair 2's candidate run had a neighbour (its latency x1.6 there): with 6 clean pairs left, latency is
    judged on them, and nothing is called."""
    doc = gate(make_pairs(busy={2: ("b", [n for n, *_ in PHASES])}))
    assert doc["exit_code"] == PASS
    f = fig(doc, "steady state E2E p50")
    assert 2 not in f["judged_on"] and len(f["judged_on"]) == 6 and "2" in str(f["excluded"]["host"])


def test_a_neighbour_beside_every_candidate_run_is_exit_4_naming_the_runs():
    """The issue's case: a no-change gate with a neighbour busy during the candidate's runs only (x1.6 there).
    No pair saw the same host twice, so every pair is used, where b looks 60 % slower: not called a regression;
    exit 4, naming the pairs, their runs and their hosts, and what to do."""
    busy = {k: ("b", [n for n, *_ in PHASES]) for k in range(1, 8)}
    doc = gate(make_pairs(busy=busy))
    held = [f for f in doc["figures"] if f.get("host")]
    assert doc["exit_code"] == INCONCLUSIVE_EXIT and doc.get("host_differed") and held, doc["reason"]
    assert not doc["regressed"]
    assert all(f["verdict"] == C.NOT_JUDGED and "candidate's run was the busier" in f["why"] for f in held)
    assert "pair 1: baseline x-" in doc["reason"] and "others 1.00 cores" in doc["reason"]
    assert "--pairs" in doc["reason"] and "quieter" in doc["reason"]


def test_a_regression_seen_only_with_the_busy_pairs_is_not_called():
    """Three of seven candidate runs had a neighbour, and the build is also 50 % slower: four clean pairs are
    too few to judge, the seven together show it, but with the neighbour in them: held, exit 4."""
    busy = {k: ("b", [n for n, *_ in PHASES]) for k in (1, 3, 5)}
    doc = gate(make_pairs(slow=1.5, busy=busy))
    held = [f for f in doc["figures"] if f.get("host")]
    assert held and all(f["metric"].startswith(("E2E", "TTFT")) or f["kind"] == "value" for f in held)
    assert not [f for f in doc["figures"] if f["verdict"] == C.WORSE and f["kind"] == "latency"]


def test_an_error_regression_is_called_whatever_the_host():
    """The candidate answers 10 % of the fault's requests with HTTP 500 in every pair, and three pairs have a
    neighbour: the error figures are still worse, and the gate exits 1."""
    busy = {k: ("b", ["kill-r1"]) for k in (1, 3, 5)}
    doc = gate(make_pairs(errors=0.10, busy=busy))
    assert doc["exit_code"] == REGRESSION
    assert fig(doc, "kill-r1 error rate")["verdict"] == C.WORSE
    assert fig(doc, "kill-r1 failed requests per run")["verdict"] == C.WORSE


def test_timeouts_of_a_pair_whose_host_differed_are_set_aside():
    """Timeouts only where the candidate's run had a neighbour: a slow host's doing, set aside, not called."""
    busy = {k: ("b", ["kill-r1"]) for k in range(1, 8)}
    doc = gate(make_pairs(busy=busy, b_timeouts={k: 0.2 for k in range(1, 8)}))
    f = fig(doc, "kill-r1 error rate")
    assert f["verdict"] != C.WORSE and sum(f["excluded"]["set_aside"].values()) > 100
    assert fig(doc, "kill-r1 failed requests per run")["verdict"] != C.WORSE
    # the same timeouts with the hosts alike are the candidate's own: called
    doc = gate(make_pairs(b_timeouts={k: 0.2 for k in range(1, 8)}))
    assert fig(doc, "kill-r1 error rate")["verdict"] == C.WORSE and doc["exit_code"] == REGRESSION


def test_four_pairs_cannot_judge_and_say_so():
    doc = gate(make_pairs(n=4))
    assert doc["exit_code"] == INCONCLUSIVE_EXIT and doc["judged"] == 0
    f = fig(doc, "steady state E2E p50")
    assert f["verdict"] == C.NOT_JUDGED and "needs 5" in f["why"] and doc["needs_pairs"] >= 5
    assert "--pairs" in doc["reason"]


def test_a_p99_with_too_few_requests_a_run_is_not_judged():
    doc = gate(make_pairs(), GateSettings(percentiles=(50, 99.9)))
    f = fig(doc, "steady state E2E p99.9")
    assert f["verdict"] == C.NOT_JUDGED and "requests a run" in f["why"]


def test_slow_host_failures():
    r = RequestRecord(id="1", case="c", endpoint="e", stream=True, t_sched=0, t_start=0, outcome="timeout")
    assert slow_host_failure(r)
    for status, want in ((504, True), (408, True), (500, False), (429, False)):
        r = RequestRecord(id="1", case="c", endpoint="e", stream=True, t_sched=0, t_start=0, outcome="http_error",
                          status=status)
        assert slow_host_failure(r) is want


@pytest.mark.parametrize("seed", range(40))
def test_no_change_gates_with_neighbours_in_random_runs_pass(seed):
    """40 no-change gates (seeded), each with a neighbour in 0-4 random runs, in some phases: none exits 1."""
    rng = np.random.default_rng(1000 + seed)
    busy = {int(k): (str(rng.choice(["a", "b"])), list(rng.choice([n for n, *_ in PHASES], 2)))
            for k in rng.choice(np.arange(1, 8), rng.integers(0, 5), replace=False)}
    assert gate(make_pairs(seed=seed, busy=busy), seed=seed)["exit_code"] != REGRESSION


def test_a_fault_no_client_saw_in_some_runs_is_not_timed_and_asks_for_nothing():
    """time to detect is None where no client saw the kill: those pairs are not timed, and the figure, left on 4
    pairs, is not judged without asking for more pairs (more runs would not make clients see it): exit 0."""
    pairs = make_pairs()
    for p in pairs[:3]:
        p.b.report["recovery"]["faults"][0]["time_to_detect"] = {"value": None}
    doc = gate(pairs)
    f = fig(doc, "kill-r1 time to detect")
    assert f["verdict"] == C.NOT_JUDGED and "no client saw the fault in pair(s) 1, 2, 3" in f["why"]
    assert not f.get("needs_pairs") and doc["exit_code"] == PASS


def test_an_aa_gate_says_what_this_environment_can_see():
    from chaos.gate.report import markdown

    pairs = make_pairs()
    doc = {**gate(pairs), "aa": True, "interleaved": True, "pairs": 7, "seed": 1, "suite": "s", "candidate": "t",
           "baseline": "t", "settings": {"tolerance": 0.1, "floor_s": 0.005, "recovery_floor_s": 0.5,
                                         "error_tolerance": 0.01, "host_bound": 0.25},
           "runs": [{"name": "x", "pair": p.number, "order": p.order, "side": s, "status": "passed",
                     "run_dir": getattr(p, s).run_dir, "host": getattr(p, s).report["host"]["load"]}
                    for p in pairs for s in "ab"]}
    md = markdown(doc)
    assert "chaos gate (A/A control): PASS" in md and "### A/A control" in md and "no false alarm" in md
    assert "smallest change visible" in md and "| x · every phase E2E (all percentiles) |" in md
    assert "### The host, run by run" in md and "| x | 1 |" in md


def test_pairs_within_the_bound_but_all_one_way_are_sides_that_differed():
    """Every candidate run had 0.2 cores more of others than its baseline (within the 0.25 bound, pair by pair)
    and ran 30 % slower: a side that differed, not judged for the host, exit 4."""
    pairs = make_pairs(slow=1.3)
    for p in pairs:
        for ph in p.b.report["host"]["phases"].values():
            ph["others"] += 0.2
        p.b.report["host"]["load"]["others"] += 0.2
    doc = gate(pairs)
    held = [f for f in doc["figures"] if f.get("host")]
    assert doc["exit_code"] == INCONCLUSIVE_EXIT and held and "0.20 cores more" in held[0]["why"]
    assert not [f for f in doc["figures"] if f["verdict"] == C.WORSE and f["kind"] == "latency"]


def test_a_busier_baseline_only_hides_a_regression_so_its_pairs_still_count_for_worse():
    """The candidate is 2.5x slower, and three of seven baseline runs had a neighbour (x1.6 there): four clean pairs
    are too few, but the busy ones can only understate the regression, never make one, so "worse" is judged on all
    seven and called (exit 1), where leaving every busy pair out would have held it (exit 4)."""
    busy = {k: ("a", [n for n, *_ in PHASES]) for k in (1, 2, 3)}
    doc = gate(make_pairs(slow=2.5, busy=busy))
    f = fig(doc, "every phase E2E (all percentiles)")
    assert doc["exit_code"] == REGRESSION and f["verdict"] == C.WORSE and f["judged_on"] == list(range(1, 8))
    assert "can only hide a regression" in f["host_note"]
