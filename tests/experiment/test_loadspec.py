"""The load: section as a LoadSpec: built once by the loader, read by field, and given back exactly as written."""

from __future__ import annotations

import textwrap

import pytest

from chaos.experiment.loadspec import LoadSpec
from chaos.experiment.model import load_experiment


def test_the_loader_builds_it_and_to_dict_gives_the_section_back_key_order_included(tmp_path):
    (tmp_path / "exp.yaml").write_text(textwrap.dedent("""\
        name: x
        vars: {USERS: 3}
        target: {kind: openai, base_url: "http://127.0.0.1:9/v1", model: m}
        load: {workload: chat, users: "${USERS}", duration: 20s, seed: 7, timeouts: {connect: 2s}}
        """))
    load = load_experiment(str(tmp_path / "exp.yaml")).load
    assert isinstance(load, LoadSpec)
    assert (load.users, load.seed, load.stream, load.temperature, load.seconds) == (3, 7, True, 0.0, 20.0)
    assert list(load.to_dict().items()) == [("workload", "chat"), ("users", 3), ("duration", "20s"), ("seed", 7),
                                            ("timeouts", {"connect": "2s"})]


def test_built_in_code_it_writes_what_differs_from_the_defaults():
    load = LoadSpec(users=2, duration="5s")
    assert load.to_dict() == {"users": 2, "duration": "5s"} and load.seconds == 5.0
    assert LoadSpec(steps=[1, 2, 4], step_duration="10s").seconds == 30.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(users=2, rate=3), "load.rate: choose one load shape, not users and rate"),
    (dict(workload="chat", mix={"chat": 1}), "load.mix: give workload or mix, not both"),
    (dict(workload="replay"), "load: the replay workload needs load.replay: FILE"),
])
def test_keys_that_rule_each_other_out_are_refused_as_the_checks_refuse_them_in_a_file(kwargs, message):
    with pytest.raises(ValueError) as e:
        LoadSpec(**kwargs)
    assert str(e.value) == message
