"""kill_instance's restart warnings (KillInstance.warnings), as `chaos validate`, --dry-run and the run get them."""

import pytest

from chaos.experiment.model import load_experiment
from chaos.run.timing import restart_warnings


def experiment(tmp_path, fault: str):
    p = tmp_path / "e.yaml"
    p.write_text("name: w\ntarget: {kind: reference, replicas: 2, preset: tiny}\n"
                 f"load: {{workload: chat, users: 1, duration: 30s}}\nfaults:\n  - {fault}\n")
    return load_experiment(str(p))


@pytest.mark.parametrize("fault", [
    "{type: kill_instance, at: 5s}",  # killed for good: nothing to come back
    "{type: kill_instance, at: 1s, restart_after: 1s}",  # back by 2 + 15 + 10 = 27s, before the load's 30s
    "{type: pause_instance, at: 5s, duration: 20s}",
])
def test_a_kill_that_leaves_time_or_another_fault_is_not_warned(tmp_path, fault):
    assert restart_warnings(experiment(tmp_path, fault)) == []


def test_a_restart_the_load_may_not_outlast_is_warned_with_the_load_it_needs(tmp_path):
    exp = experiment(tmp_path, "{type: kill_instance, at: 5s, restart_after: 3s, name: k1}")
    assert restart_warnings(exp) == [
        "fault k1: the restart begins at 8s; with ~15s to start and ~10s to be routed requests, the load (30s) "
        "may end first and served_by_all is then not judged: make the load at least 33s"]


def test_a_restart_after_the_load_never_happens(tmp_path):
    exp = experiment(tmp_path, "{type: kill_instance, at: 5s, restart_after: 40s}")
    assert restart_warnings(exp) == [
        "fault kill_instance#0: the restart at 45s comes after the load ends (30s), so it never happens; checks "
        "that need the instance back are not judged"]
