"""Experiment and target files: every shipped file is valid; every class of bad file gets one clear message."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from chaos.experiment.loader import ExperimentError, parse_yaml
from chaos.experiment.model import load_experiment, load_target
from chaos.experiment.validation import validate

GOOD = """\
name: t
target: {kind: reference, replicas: 2, preset: tiny}
load: {workload: chat, users: 2, duration: 10s}
faults:
  - {type: kill_instance, at: 3s, instance: 1, restart_after: 2s}
"""


def write(tmp_path, text, name="exp.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def problems(tmp_path, text, **kw):
    with pytest.raises(ExperimentError) as e:
        load_experiment(write(tmp_path, text), **kw)
    return e.value.problems


@pytest.mark.parametrize("path", sorted(glob.glob("experiments/*.yaml")))
def test_shipped_experiments_are_valid(path):
    exp = load_experiment(path)
    # each verifies something about a fault: one on the schedule, a replayed log's bad input, or input growth
    assert exp.verify.asked() and (exp.faults or exp.load.replay or exp.verify.latency_growth)


@pytest.mark.parametrize("experiment", ["experiments/kill-instance.yaml", "experiments/all-primaries-down.yaml"])
def test_the_shipped_targets_take_their_preset_from_a_var_not_the_environment(experiment, monkeypatch):
    monkeypatch.setenv("PRESET", "tiny")
    target = load_experiment(experiment).target
    assert target.source.startswith(os.path.abspath("targets")) and target.settings["preset"] == "small"
    assert load_experiment(experiment, {"PRESET": "tiny"}).target.settings["preset"] == "tiny"
    spec, _ = load_target(target.source, {"PRESET": "tiny"})  # chaos validate / targets up on the file itself
    assert spec.settings["preset"] == "tiny" and load_target(target.source)[0].settings["preset"] == "small"


def test_the_validator_cache_never_serves_another_schema():
    """Temporary schemas: a freed one's id may be reused by the next; each must be checked against itself."""
    doc = parse_yaml("x: 5\n", "t.yaml")
    for limit in range(40):
        schema = {"type": "object", "properties": {"x": {"type": "integer", "maximum": limit}}}
        assert bool(validate(doc, schema)) == (limit < 5), limit
        del schema  # freed before the next is made: CPython hands its address (its id) on


def test_good_file_parses_durations_and_target(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD))
    assert exp.target.kind == "reference" and exp.target.replicas == 2
    assert exp.faults[0].at == 3.0 and exp.faults[0].params.restart_after == 2.0
    assert exp.load_duration == 10.0


def test_malformed_yaml_names_line_and_column(tmp_path):
    (p,) = problems(tmp_path, "name: t\nload: {users: 2\ntarget: x\n")
    assert p.startswith(str(tmp_path / "exp.yaml") + ":3:") and "YAML syntax error" in p


def test_unknown_key_suggests_the_nearest(tmp_path):
    (p,) = problems(tmp_path, GOOD + "fautls: []\n")
    assert ":6:1: fautls: unknown key 'fautls' (did you mean 'faults'?)" in p


def test_unknown_fault_type_suggests(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("type: kill_instance", "type: kill_instanse"))
    assert ":5:12: faults[0].type:" in p and "(did you mean 'kill_instance'?)" in p


def test_wrong_types_and_bad_values(tmp_path):
    ps = problems(tmp_path, GOOD.replace("users: 2", "users: many").replace("at: 3s", "at: soon"))
    joined = "\n".join(ps)
    assert "load.users: expected integer, got str 'many'" in joined
    assert "faults[0].at: 'soon' is not a duration" in joined
    assert len(ps) == 2  # both reported at once


def test_missing_required_key(tmp_path):
    (p,) = problems(tmp_path, "name: t\ntarget: {kind: reference}\n")
    assert "missing required key 'load'" in p


def test_missing_target_file(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("{kind: reference, replicas: 2, preset: tiny}", "targets/nope.yaml"))
    assert ":2:9: target: target file 'targets/nope.yaml' not found" in p


def test_bad_target_file_points_into_that_file(tmp_path):
    write(tmp_path, "kind: reference\nreplicas: two\n", "t.yaml")
    (p,) = problems(tmp_path, GOOD.replace("{kind: reference, replicas: 2, preset: tiny}", "t.yaml"))
    assert p.startswith(str(tmp_path / "t.yaml") + ":2:11: replicas:")


def test_secrets_are_refused_in_files(tmp_path):
    text = GOOD.replace("{kind: reference, replicas: 2, preset: tiny}",
                        "{kind: openai, base_url: 'https://x/v1', model: m, api_key: sk-123}").split("faults:")[0]
    (p,) = problems(tmp_path, text)
    assert "unknown key 'api_key'" in p and "api_key_env" in p


def test_ramp_load_shape(tmp_path):
    from chaos.experiment.loadspec import load_config

    exp = load_experiment(write(tmp_path, GOOD.replace("users: 2", "ramp: '1:8'")))
    cfg = load_config(exp.load, ["http://127.0.0.1:1"], None, None, str(tmp_path))
    assert cfg.plan.kind == "ramp" and cfg.plan.users_at(9.99)[0] == 8 and cfg.plan.stop_timeout == 5
    ps = problems(tmp_path, GOOD.replace("users: 2", "ramp: '1:8', users: 2"))
    assert any("choose one load shape, not users and ramp" in p for p in ps)
    assert problems(tmp_path, GOOD.replace("users: 2", "ramp: 'up'"))


def test_semantic_checks_instance_and_timing(tmp_path):
    ps = problems(tmp_path, GOOD.replace("instance: 1", "instance: 5").replace("at: 3s", "at: 30s"))
    joined = "\n".join(ps)
    assert "faults[0].instance: instance 5 does not exist: the target has 2" in joined
    assert "faults[0].at: at 30s is not before the end of the load (10s)" in joined


def test_variables_from_file_env_and_cli(tmp_path, monkeypatch):
    text = "vars: {U: 3}\n" + GOOD.replace("load: {workload: chat, users: 2, duration: 10s}",
                                           "load:\n  users: ${U}\n  duration: ${D:-12s}")
    assert load_experiment(write(tmp_path, text)).load.users == 3
    monkeypatch.setenv("U", "4")
    assert load_experiment(write(tmp_path, text)).load.users == 4
    exp = load_experiment(write(tmp_path, text), {"U": "5", "D": "20s"})
    assert exp.load.users == 5 and exp.load_duration == 20
    monkeypatch.setenv("D", "30s")  # declared in place only: its default or a --var, never the environment
    assert load_experiment(write(tmp_path, text)).load_duration == 12
    (p,) = problems(tmp_path, GOOD.replace("users: 2", "users: '${NOPE}'"))
    assert "${NOPE} is not declared: declare it under vars:" in p and "--var NOPE=VALUE" in p


def test_cli_validate_exit_codes_and_no_traceback(tmp_path):
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, GOOD + "extra: 1\n", "bad.yaml")
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", good, bad], capture_output=True, text=True)
    assert r.returncode == 2
    assert "good.yaml: ok" in r.stdout and "bad.yaml:6:1: extra: unknown key 'extra'" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "chaos", "run", str(tmp_path / "none.yaml")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no such file" in r.stderr


def test_schema_is_published_and_lists_fault_types():
    r = subprocess.run([sys.executable, "-m", "chaos", "schema"], capture_output=True, text=True)
    schema = json.loads(r.stdout)
    from chaos.faults import FAULT_TYPES

    types = schema["properties"]["faults"]["items"]["properties"]["type"]["enum"]
    assert types == sorted(FAULT_TYPES)  # every registered fault has a schema, and no schema lacks a fault
    assert {"kill_instance", "pause_instance", "server_hook", "latency", "timeout", "link_down",
            "rate_limit_storm", "stream_stall"} <= set(types)
    r = subprocess.run([sys.executable, "-m", "chaos", "list", "faults"], capture_output=True, text=True)
    for name in ("kill_instance", "pause_instance", "latency", "stream_stall"):
        assert name in r.stdout


def test_published_schemas_are_valid_json_schema():
    import jsonschema

    from chaos.experiment import schema as S

    for schema in (S.EXPERIMENT, S.TARGET_FILE):
        jsonschema.Draft202012Validator.check_schema(schema)
