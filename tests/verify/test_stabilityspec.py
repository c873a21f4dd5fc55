"""verify: stability: and load: stability: in an experiment file: typed at load, a bad value refused with
file:line:col, and the probes mixed into the workload the run builds."""

import textwrap

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.loadspec import load_config
from chaos.experiment.model import load_experiment
from chaos.verify.stabilityspec import StabilitySpec

HEAD = """\
name: t
target: {kind: reference, replicas: 2, preset: tiny}
load: {workload: chat, users: 2, duration: 10s, stability: {share: 25%, prompts: 3}}
faults:
  - {type: kill_instance, at: 3s, instance: 1, restart_after: 2s}
"""


def load(tmp_path, text: str):
    p = tmp_path / "exp.yaml"
    p.write_text(textwrap.dedent(text))
    return load_experiment(str(p))


def problems(tmp_path, text: str) -> list[str]:
    with pytest.raises(ExperimentError) as e:
        load(tmp_path, text)
    return e.value.problems


def test_thresholds_arrive_typed_with_off_and_what_was_written(tmp_path):
    exp = load(tmp_path, HEAD + "verify:\n  stability: {identical: 99%, max_garbled: 'off', loop_threshold: 0.6}\n")
    s = exp.verify.stability
    assert isinstance(s, StabilitySpec) and s.identical == pytest.approx(0.99) and s.max_garbled is None
    assert s.json_valid == 1.0 and s.loop_threshold == 0.6 and s.written == ("identical", "max_garbled")
    specs = load_config(exp.load, ["http://127.0.0.1:9"], None, None, str(tmp_path)).workload
    assert [(sp.name, w) for sp, w in specs] == [("chat", 1.0), ("stability", pytest.approx(1 / 3))]
    assert specs[1][0].extra == {"prompts": 3}


def test_a_bad_threshold_is_refused_at_its_line(tmp_path):
    (p,) = problems(tmp_path, HEAD + "verify:\n  stability:\n    identical: 150%\n")
    assert ":8:16: verify.stability.identical: '150%' is not a fraction from 0% to 100%" in p and "or off" in p


def test_a_bad_load_option_is_refused(tmp_path):
    (p,) = problems(tmp_path, HEAD.replace("prompts: 3", "prompts: 40"))
    assert ":3:" in p and "load.stability.prompts: 40 is out of range: from 1 to 16" in p
    (p,) = problems(tmp_path, HEAD.replace("prompts: 3", "prompts: 2, structured: 3"))
    assert "the run would refuse this load: stability.structured (3)" in p


def test_the_probes_are_a_workload_of_their_own_in_a_mix(tmp_path):
    exp = load(tmp_path, HEAD.replace("workload: chat, ", "mix: {chat: 3, stability: 1}, ").replace(
        "stability: {share: 25%, prompts: 3}", "stability: {max_tokens: 16}"))
    specs = load_config(exp.load, ["http://127.0.0.1:9"], None, None, str(tmp_path)).workload
    assert [(sp.name, w, sp.extra) for sp, w in specs] == [("chat", 3.0, {}), ("stability", 1.0, {"max_tokens": 16})]
