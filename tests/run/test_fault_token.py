"""The run's fault token: generated per run, handed to each replica by its environment (restarts too), sent by
server_hook, and written nowhere in the run directory or the run's output. The environment, /admin/faults and
"written nowhere" are asserted on the shipped kill-instance run (test_runs.py: one whole run less here); the hooks
a replica refuses, here."""

import json
import os
import subprocess
import sys

import pytest

from chaos.experiment.model import TargetSpec
from chaos.targets.reference import ReferenceTarget

from .conftest import leftovers, report, start_run, unreverted


def spec(allow_remote=False, **settings) -> TargetSpec:
    return TargetSpec(kind="reference", name="t", settings={"preset": "tiny", "allow_remote": allow_remote,
                                                            **settings}, source="t.yaml", replicas=1,
                      allow_remote=allow_remote)


def test_allow_remote_only_when_the_target_says_so(tmp_path):
    local = ReferenceTarget(spec(gateway={}), str(tmp_path))
    assert "--allow-remote" not in local.command(local.instances[0])
    assert "--allow-remote" not in local.command(local.gateway)
    remote = ReferenceTarget(spec(gateway={}, allow_remote=True), str(tmp_path))
    assert "--allow-remote" in remote.command(remote.instances[0])
    assert "--allow-remote" in remote.command(remote.gateway)
    assert local.fault_token != remote.fault_token  # one per run
    assert all(local.fault_token not in part for part in local.command(local.instances[0]))  # never in argv
    assert sys.executable in local.command(local.instances[0])


SECRET_ECHO = """\
name: masked
vars: {RUN_TOKEN: placeholder}
target:
  kind: process
  # A command that prints its secret argument and dies: the runner's error quotes its last output.
  command: ["%s", "-c", "import sys; print('started with', sys.argv[1]); sys.exit(3)", "${RUN_TOKEN}", "{port}"]
  model: m
  startup_timeout: 30s
load: {workload: chat, users: 1, duration: 4s}
"""


@pytest.mark.slow
def test_a_secret_variable_reaches_no_output_of_the_run(tmp_path):
    """The experiment's mask (and the fault token) go over everything the runner writes or prints: the view's
    events, the journal, the reports. Here a target's own output quotes a secret-named variable's value."""
    value = "s3cret-value-0123456789"
    f = tmp_path / "masked.yaml"
    f.write_text(SECRET_ECHO % sys.executable)
    run_dir = tmp_path / "run"
    proc = start_run(str(f), run_dir, env={"RUN_TOKEN": value})
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "exited with 3" in out, out[-2000:]
    assert "started with ***" in out and value not in out
    for root, _, files in os.walk(run_dir):
        for name in files:
            if name.startswith("process-"):
                continue  # the target's own log: what it printed is its business, not the runner's output
            assert value not in open(os.path.join(root, name), errors="replace").read(), name


# The hook at 1 s for 2 s, then 1 s of load: nothing judges its window, the test reads what it did (and, where r0
# took it, the 500s r0 gave meanwhile).
REFUSED = """\
name: refused
target: {kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s}
load: {workload: chat, users: 2, duration: 4s, output_tokens: 4-8}
faults:
  - {type: server_hook, at: 1s, instance: all, fail_fraction: 1.0, duration: 2s}
"""

# The real runner and real replicas, but the replicas named in argv[1] get a token other than the run's, as if
# another run had started them: their /admin/faults refuses the run's hooks with 401.
ANOTHER_TOKEN = """\
import sys

import chaos.targets.reference as ref
from chaos.cli import main

others, start = sys.argv[1].split(","), ref.ReferenceTarget.start_instance


def start_with_another_token(self, inst):
    mine = self.fault_token
    if inst.id in others:
        self.fault_token = "another-runs-token-" + inst.id * 16
    try:
        start(self, inst)
    finally:
        self.fault_token = mine


ref.ReferenceTarget.start_instance = start_with_another_token
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
@pytest.mark.parametrize("others", ["r1", "r0,r1"])
def test_a_hook_the_replicas_refuse_is_reported_not_judged_as_applied(tmp_path, others):
    f = tmp_path / "refused.yaml"
    f.write_text(REFUSED)
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", ANOTHER_TOKEN, others, "run", str(f), "--out", str(run_dir)],
                       capture_output=True, text=True, timeout=180)
    rep = report(run_dir)
    hook = rep["faults"][0]
    urls = {i["id"]: i["url"] for i in rep["target"]["instances"]}
    assert hook["apply_error"] and "401" in hook["apply_error"] and urls["r1"] in hook["apply_error"], hook
    assert any("refused by" in n for n in rep["notes"])
    if others == "r1":  # r0 took it: the fault happened there, and the run goes on to be judged
        assert r.returncode in (0, 1, 4), r.stdout[-2000:] + r.stderr[-2000:]
        assert hook["applied"] and hook["reverted"] and urls["r0"] not in hook["apply_error"]
        assert "1 of 2 instance(s)" in hook["description"]
        # server_hook sent the run's token and r0 acted on it: fail_fraction 1.0 shows as its 500s while it was on
        recs = [json.loads(line) for line in open(run_dir / "requests.jsonl")]
        hit = [x for x in recs if x["status"] == 500 and hook["applied_at"] <= x["t_start"] <= hook["reverted_at"]]
        assert hit, "fail_fraction 1.0 on r0 must show as HTTP 500s while it is on (the hook was accepted)"
    else:  # nobody took it: the run must not judge a fault that never happened
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
        assert not hook["applied"] and rep["checks"] == []
        assert "no instance accepted the hooks" in rep["reason"]
    assert unreverted(run_dir) == [] and leftovers(run_dir) == []
