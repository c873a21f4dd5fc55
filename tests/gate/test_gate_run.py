"""The gate end to end, with real runs in short mode: a no-change "upgrade" passes (interleaved a b b a), a build
whose engine steps are 4x slower fails against those recorded runs, naming each regressed figure with its
interval, and too few samples is inconclusive (exit 4) saying how many runs it needs.

The no-change case runs at a wide tolerance (50 %): this test proves the mechanics; bench/gate_calibration.py
measures how often the default tolerance passes a no-change upgrade (BENCHMARKS.md)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from chaos.gate.figures import Settings, Side, experiment_figures
from chaos.gate.gate import Plan, decide
from chaos.suite.execute import read_report
from chaos.suite.model import load_plan

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENT = f"""name: gate-short
target: {ROOT}/targets/reference.yaml
load:
  workload: chat
  users: 4
  duration: 12s
  input_tokens: 30-60
  output_tokens: 16-24
  timeouts: {{connect: 2s, first_token: 10s, total: 30s}}
steady_state:
  window: 5s
  slo: {{p95_latency: 10s, error_rate: 5%}}
faults:
  - {{type: kill_instance, name: kill-r1, at: 5s, instance: r1, signal: SIGKILL, restart_after: 1s}}
verify:
  recovery_time: {{max: 30s, window: 3s}}
"""
WIDE = ["--tolerance", "0.5", "--floor", "0.02", "--recovery-floor", "3", "--error-tolerance", "0.1",
        "--percentiles", "50,95", "--var", "PRESET=tiny"]


def gate(*args, timeout=400):
    return subprocess.run([sys.executable, "-m", "chaos", "gate", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def gates(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    exp = d / "gate-short.yaml"
    exp.write_text(EXPERIMENT)
    same = gate("--baseline-target", "targets/reference.yaml", "--candidate", "targets/reference.yaml",
                str(exp), "--repeat", "2", "--out", str(d / "same"), *WIDE)
    # one candidate run against the two recorded: latency is judged (the recovery times, one value a run, are
    # not, and say they need 2 runs a side; a regression decides regardless)
    slower = gate("--baseline", str(d / "same"), "--candidate", "targets/builds/slower-steps.yaml", str(exp),
                  "--repeat", "1", "--out", str(d / "slower"), "--var", "SLOWDOWN=4", *WIDE)
    return d, exp, same, slower


def doc(path):
    return json.loads((path / "gate.json").read_text())


def test_a_no_change_upgrade_passes_interleaved(gates):
    d, _, same, _ = gates
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    g = doc(d / "same")
    assert g["verdict"] == "pass" and g["interleaved"] and g["score"] == 100.0
    assert [(r["side"], r["exit_code"]) for r in g["runs"]] == [("a", 0), ("b", 0), ("b", 0), ("a", 0)]
    names = {f["figure"] for f in g["figures"]}
    # under the fault as well as in the steady state, and the recovery figures
    assert {"gate-short · steady state E2E p95", "gate-short · kill-r1 TTFT p50", "gate-short · kill-r1 error rate",
            "gate-short · kill-r1 time to restore", "gate-short · kill-r1 failed requests per run"} <= names
    assert "PASS" in same.stdout and (d / "same" / "gate.md").exists()


def test_a_slower_build_is_a_regression_named_with_its_interval(gates):
    d, _, _, slower = gates
    assert slower.returncode == 1, slower.stdout[-3000:] + slower.stderr[-2000:]
    g = doc(d / "slower")
    assert not g["interleaved"] and [r["side"] for r in g["runs"]] == ["b"]
    restore = next(f for f in g["figures"] if f["figure"].endswith("time to restore"))
    assert restore["verdict"] == "not judged" and restore["needs_runs"] == 2
    assert any(f.endswith("E2E p50") for f in g["regressed"]), g["regressed"]
    md = (d / "slower" / "gate.md").read_text()
    worse = next(f for f in g["figures"] if f["figure"] in g["regressed"] and f["figure"].endswith("E2E p50"))
    assert worse["ratio"]["low"] > 1.5 and worse["p_holm"] <= 0.05
    assert f"| **{worse['figure']}** |" in md and "×" in md and "(Holm)" in md
    cases = ET.parse(d / "slower" / "junit.xml").getroot().iter("testcase")
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == set(g["regressed"])
    assert "REGRESSION" in slower.stdout


def test_too_few_samples_is_inconclusive_and_says_how_many_runs(gates):
    d, exp, _, _ = gates
    g = doc(d / "same")
    runs = {s: [r["run_dir"] for r in g["runs"] if r["side"] == s] for s in "ab"}
    a = Side.read(runs["a"], [read_report(x) for x in runs["a"]])
    b = Side.read(runs["b"], [read_report(x) for x in runs["b"]])
    s = Settings(percentiles=(99.9,), tolerance=0.5, floor_s=0.02, recovery_floor_s=3, error_tolerance=0.1)
    suite = load_plan(str(exp), {"PRESET": "tiny"})
    out = decide(experiment_figures("gate-short", a, b, s), s, Plan(suite, str(d), "t", "t", {}, 2))
    assert out["exit_code"] == 4 and out["needs_runs"] > 2
    assert f"--repeat {out['needs_runs']}" in out["reason"]


def test_a_setup_error_is_exit_2_before_any_run(gates, tmp_path):
    _, exp, _, _ = gates
    r = gate("--baseline-target", "targets/reference.yaml", "--candidate", "targets/nope.yaml", str(exp),
             "--out", str(tmp_path / "g"))
    assert r.returncode == 2 and "targets/nope.yaml" in r.stderr and not (tmp_path / "g").exists()
