"""Suite files: validated like experiment files (file:line), every experiment loaded before anything starts."""

import os

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.suite.model import load_plan, load_suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, text, name="suite.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def problems(path, **kw):
    with pytest.raises(ExperimentError) as e:
        load_suite(path, **kw)
    return e.value.problems


def test_a_suite_loads_with_targets_vars_and_names(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    s = load_suite(write(tmp_path, "name: nightly\nvars: {PRESET: tiny}\nexperiments:\n"
                                   "  - file: experiments/kill-instance.yaml\n    vars: {USERS: 3}\n"
                                   "  - {file: experiments/slow-replica.yaml, name: slow, stop_on_failure: true,"
                                   " target: targets/reference.yaml}\n"))
    assert [e.name for e in s.entries] == ["kill-instance", "slow"]
    kill, slow = s.entries
    assert kill.vars == {"PRESET": "tiny", "USERS": "3"} and kill.target is None and not kill.stop_on_failure
    assert slow.stop_on_failure and slow.target.endswith("targets/reference.yaml")


def test_problems_name_file_line_and_key(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = write(tmp_path, "name: nightly\nexperiments:\n  - file: experiments/kill-instance.yaml\n"
                           "    retries: 3\n  - file: experiments/nope.yaml\n")
    got = problems(path)
    assert any(f"{path}:4:5" in p and "retries" in p for p in got), got


def test_a_missing_experiment_file_and_a_duplicate_name(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = write(tmp_path, "name: nightly\nexperiments:\n  - file: experiments/nope.yaml\n"
                           "  - file: experiments/kill-instance.yaml\n  - file: experiments/kill-instance.yaml\n")
    got = problems(path)
    assert any(f"{path}:3:" in p and "not found" in p for p in got), got
    assert any(f"{path}:5:" in p and "second experiment named 'kill-instance'" in p for p in got), got


def test_an_experiment_that_does_not_validate_is_named_with_the_suite_line(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = write(tmp_path, "name: bad\ntarget: targets/reference.yaml\nload: {workload: chat, users: 0, "
                          "duration: 5s}\n", "bad.yaml")
    path = write(tmp_path, f"name: nightly\nexperiments:\n  - file: {bad}\n")
    got = problems(path)
    assert any(p.startswith(f"{path}:3:") and "(bad)" in p and f"{bad}:3:" in p and "users" in p
               for p in got), got


def test_not_a_suite_and_one_experiment_as_a_suite_of_one(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    got = problems("experiments/kill-instance.yaml")
    assert "not a suite file" in got[0]
    s = load_plan("experiments/kill-instance.yaml", {"USERS": "2"}, target="targets/builds/no-retries.yaml")
    (e,) = s.entries
    assert (e.name, e.vars, e.target) == ("kill-instance", {"USERS": "2"}, "targets/builds/no-retries.yaml")


def test_chaos_validate_checks_the_shipped_suites_as_chaos_gameday_loads_them(tmp_path):
    """`chaos validate` took a suite for an experiment, and refused every shipped one ("unknown key 'experiments'")."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", "gamedays/nightly.yaml", "gates/upgrade.yaml"],
                       capture_output=True, text=True, cwd=root, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gamedays/nightly.yaml: ok (suite of 4 experiment(s))" in r.stdout
    bad = tmp_path / "suite.yaml"
    bad.write_text("name: s\nexperiments:\n  - {file: nosuch.yaml}\n")
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", str(bad)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{bad}:3:" in r.stderr and "experiment file 'nosuch.yaml' not found" in r.stderr
