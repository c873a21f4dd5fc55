"""The gate's goodput figure on synthetic pairs (tests/gate/test_pairs.py builds them: E2E log-normal around
50 ms x slow): a phase's share of requests within E2E <= 80 ms is ~97 % unchanged, ~80 % at 1.3x slower. A drop is
worse, a rise better; failed requests are never good; a busier candidate host is held as for latency; a run with
no bounds has no goodput figure."""

import pytest

from chaos.gate.pairs import goodput_figures
from chaos.verify import compare as C
from chaos.verify.goodputspec import GoodputSLO
from tests.gate.test_pairs import PHASES, S, fig, gate, make_pairs

BOUNDS = GoodputSLO(e2e=0.08, source="steady_state.goodput")


def with_bounds(pairs, bounds=BOUNDS):
    for p in pairs:
        for run in (p.a, p.b):
            run.report["analysis"] = {"goodput": bounds.to_dict()}
    return pairs


def test_unchanged_goodput_is_the_same_with_both_shares_and_the_drop():
    doc = gate(with_bounds(make_pairs()))
    for name, *_ in PHASES:
        f = fig(doc, f"{name} goodput drop")
        assert f["verdict"] == C.SAME and f["kind"] == "proportion" and f["bounds"]["e2e"] == 0.08
        assert 0.9 < f["a"]["value"] < 1 and f["a"]["method"] == "wilson" and f["a"]["n"] > 7 * 300
        assert abs(f["difference"]["value"]) < S.error_tolerance  # within the allowed change
    assert doc["exit_code"] == 0


def test_a_drop_is_worse_and_a_rise_better():
    doc = gate(with_bounds(make_pairs(slow=1.3)))
    f = fig(doc, "steady state goodput drop")
    assert f["verdict"] == C.WORSE and f["p_value"] <= 0.05
    assert f["a"]["value"] - f["b"]["value"] > 0.1 and f["difference"]["low"] > 0.05  # the drop, in points
    better = gate(with_bounds(make_pairs(slow=0.7)), S)
    # the faster side cannot beat the ceiling by much (97 % -> ~100 %): only the direction must hold
    assert fig(better, "steady state goodput drop")["difference"]["value"] < 0
    assert fig(better, "steady state goodput drop")["verdict"] != C.WORSE


def test_failed_requests_are_never_good():
    doc = gate(with_bounds(make_pairs(errors=0.10)))
    f = fig(doc, "kill-r1 goodput drop")
    assert f["verdict"] == C.WORSE and 0.05 < f["difference"]["value"] < 0.15
    assert fig(doc, "steady state goodput drop")["verdict"] == C.SAME


def test_a_busier_candidate_host_is_held_as_for_latency():
    busy = {k: ("b", [n for n, *_ in PHASES]) for k in range(1, 8)}
    doc = gate(with_bounds(make_pairs(busy=busy)))
    f = fig(doc, "steady state goodput drop")
    assert f["verdict"] == C.NOT_JUDGED and f["host"] and sorted(f["excluded"]["host"]) == list(range(1, 8))


@pytest.mark.parametrize("analysis", [None, {"goodput": GoodputSLO().to_dict()}])
def test_no_bounds_no_goodput_figure(analysis):
    pairs = make_pairs(n=5)
    for p in pairs:
        for run in (p.a, p.b):
            if analysis is not None:
                run.report["analysis"] = analysis
    assert goodput_figures("x", pairs, S) == []
