"""steady_state.goodput in an experiment file: read into the experiment, chosen over the SLO's bounds for the
analysis, and a bad one refused at its line."""

from chaos.experiment.model import load_experiment
from chaos.verify.evidence import settings_for
from chaos.verify.goodputspec import GoodputSLO
from tests.experiment.test_files import GOOD, problems, write


def test_goodput_bounds_are_read_and_win_over_the_slos(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD + "steady_state:\n  slo: {p95_latency: 9s}\n"
                                         "  goodput: {ttft: 2s, tpot: 100ms}\n"))
    assert exp.steady_goodput == GoodputSLO(ttft=2.0, tpot=0.1, source="steady_state.goodput")
    assert settings_for(exp, None, None, False).goodput == exp.steady_goodput


def test_without_goodput_the_slos_bounds_are_used_and_without_either_none(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD + "steady_state: {slo: {p95_latency: 9s}}\n"))
    assert exp.steady_goodput is None
    assert settings_for(exp, None, None, False).goodput == GoodputSLO(e2e=9.0,
                                                                       source="steady_state.slo (p95_latency)")
    bare = load_experiment(write(tmp_path, GOOD, "bare.yaml"))
    assert settings_for(bare, None, None, False).goodput.is_empty()


def test_a_bad_goodput_is_refused_at_its_line(tmp_path):
    for bad in ("{}", "{ttft: 0}", "{itl: 1s}"):
        found = problems(tmp_path, GOOD + f"steady_state:\n  goodput: {bad}\n")
        assert any(":7:" in p and "goodput" in p for p in found), found
