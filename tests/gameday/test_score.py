"""A game day's key figures from a report: the P99s, goodput where the run had SLO bounds, the recovery figures
and the error budget, each with its interval and unit."""

from chaos.gameday.score import key_figures
from chaos.verify.stats import proportion


def _phase(kind, good=None, n=200):
    p99 = {"value": 0.5, "low": 0.4, "high": 0.7, "n": n}
    goodput = None if good is None else {**proportion(good, n).to_dict(), "good": good}
    return {"name": kind, "kind": kind, "e2e": {"p99": p99}, "ttft": {"p99": p99}, "goodput": goodput}


def test_goodput_is_a_key_figure_of_each_phase_with_its_wilson_interval():
    report = {"phases": [_phase("steady", good=190), _phase("fault", good=120), _phase("after", good=195)]}
    figs = {f["figure"]: f for f in key_figures("exp", report)}
    steady, fault = figs["goodput, steady state"], figs["goodput, during the fault"]
    assert (steady["value"], steady["n"], steady["unit"]) == (0.95, 200, "fraction")
    assert steady["low"] < 0.95 < steady["high"] and fault["value"] == 0.6
    assert {"E2E P99, steady state", "TTFT P99, during the fault"} <= set(figs)


def test_no_bounds_no_goodput_figure():
    report = {"phases": [_phase("run")]}
    assert [f["figure"] for f in key_figures("exp", report)] == ["E2E P99, whole run", "TTFT P99, whole run"]
