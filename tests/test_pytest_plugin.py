"""The pytest plugin (chaos/pytest_plugin.py): experiments collected and run as tests by a real pytest in a child
process, against the bundled reference server; the outcome mapping of every exit code; the cost when --chaos is
not given."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.pytest_plugin import ChaosRun, apply_outcome, outcome

pytest_plugins = ["pytester"]

TARGET = "target: {kind: reference, replicas: 1, preset: tiny, startup_timeout: 60s}"
LOAD = ("load:\n  workload: chat\n  users: ${USERS}\n  duration: ${DUR}\n  input_tokens: 30-50\n  output_tokens: 8-16\n"
        "  timeouts: {connect: 2s, first_token: 10s, total: 20s}")
FILES = {
    # passing asks only for status codes: 2 s of load is plenty; the failing one's P95 wants 20 answers: 3 s
    "passes.yaml": f"name: plugin-passes\nvars: {{USERS: 2, DUR: 2s}}\n{TARGET}\n{LOAD}\nverify:\n"
                   f"  status_codes: {{allowed: [200]}}\n",
    # No tiny model answers in a millisecond: this run is judged, and fails
    "fails.yaml": f"name: plugin-fails\nvars: {{USERS: 2, DUR: 3s}}\n{TARGET}\n{LOAD}\nverify:\n"
                  f"  slo_after: {{p95_latency: 1ms, error_rate: 1%}}\n",
    "invalid.yaml": f"name: plugin-invalid\n{TARGET}\nload: {{workload: chat, users: many, duration: 3s}}\n",
    "target.yaml": "kind: reference\nname: plugin-target\nreplicas: 1\npreset: tiny\n",
    "notes.yaml": "owner: the reliability team\nreviewed: 2026-12-01\n",
}
MARKER_TESTS = """\
import json
import pytest

@pytest.mark.chaos("exps/passes.yaml", vars={"USERS": 3})
def test_marker_run(chaos_run):
    resolved = json.loads((chaos_run.run_dir / "experiment.resolved.json").read_text())
    assert resolved["load"]["users"] == 3, resolved["load"]
    assert chaos_run.exit_code == 0 and chaos_run.verdict == "passed"
    assert chaos_run.check("status codes")["passed"] is True
    assert chaos_run.report["requests"] > 0
    print("MARKER-RUN-DIR", chaos_run.run_dir)

@pytest.mark.chaos("exps/invalid.yaml")
def test_marker_invalid_checked(chaos_run):
    raise AssertionError("not reached: the fixture fails an invalid run")

@pytest.mark.chaos("exps/invalid.yaml", check=False)
def test_marker_invalid_unchecked(chaos_run):
    assert chaos_run.exit_code == 2 and chaos_run.report is None
    assert "load.users: expected integer" in chaos_run.stderr

def test_marker_missing(chaos_run):
    pass
"""


def _outcomes(lines: list[str]) -> dict:
    """{node id: PASSED|FAILED|ERROR} from the -rA summary lines."""
    seen = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASSED", "FAILED", "ERROR") and "::" in parts[1]:
            seen[parts[1]] = parts[0]
    return seen


@pytest.mark.slow
def test_experiments_as_tests(pytester):
    """One child pytest: --chaos on a folder of experiments plus the marker tests; three real runs (~15 s each)."""
    pytester.mkdir("exps")
    for name, text in FILES.items():
        pytester.path.joinpath("exps", name).write_text(text)
    pytester.makepyfile(test_marker=MARKER_TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "-s", "--chaos", "exps",
                                      "--chaos-out", "runs", "test_marker.py", timeout=400)
    out = "\n".join(r.outlines + r.errlines)
    got = _outcomes(r.outlines)
    unjudged = [line for line in r.outlines if line.startswith("SKIPPED") and "not judged" in line]
    if unjudged:  # an overloaded box: the run says it could not judge, which is no failure of the plugin
        pytest.skip("a run could not judge on this machine: " + unjudged[0])
    assert got == {"exps/fails.yaml::fails": "FAILED", "exps/invalid.yaml::invalid": "FAILED",
                   "exps/passes.yaml::passes": "PASSED", "test_marker.py::test_marker_run": "PASSED",
                   "test_marker.py::test_marker_invalid_checked": "FAILED",
                   "test_marker.py::test_marker_invalid_unchecked": "PASSED",
                   "test_marker.py::test_marker_missing": "ERROR"}, out[-6000:]
    r.assert_outcomes(passed=3, failed=3, errors=1)
    # the target file and the plain mapping are not experiments: never collected
    assert "target.yaml" not in out and "notes.yaml" not in out

    # exit 1: the verifier's summary, each failed check with its measured value and threshold, and the report
    runs = pytester.path / "runs"
    fails = sorted(runs.glob("fails-*"))
    assert len(fails) == 1, sorted(runs.iterdir())
    failed = [c for c in json.loads((fails[0] / "report.json").read_text())["checks"] if c["passed"] is False]
    assert [c["name"] for c in failed] == ["after recovery p95_latency"]
    c = failed[0]
    assert f"FAIL  {c['name']}: measured {c['measured']}, required {c['threshold']}" in out
    assert f"report: {fails[0] / 'report.md'}" in out
    assert "Traceback" not in out and "pytest_plugin.py" not in out  # the summary, not the plugin's frames

    # an invalid file: the file:line:col and message `chaos validate` prints, and no empty run directory left
    v = subprocess.run([sys.executable, "-m", "chaos", "validate", "exps/invalid.yaml"], cwd=pytester.path,
                       capture_output=True, text=True, timeout=60)
    error = next(line for line in v.stderr.splitlines() if line.startswith("error:"))
    assert "invalid.yaml:3:" in error and error.split("invalid.yaml", 1)[1] in out
    assert not list(runs.glob("invalid-*"))
    assert "chaos run invalid.yaml: invalid input or setup failure" in out

    # the marker form: vars reached the run (asserted in the child), its run directory is under --chaos-out
    run_dir = Path(out.split("MARKER-RUN-DIR ", 1)[1].split()[0])
    assert run_dir.parent == runs and (run_dir / "report.json").exists()
    assert "the chaos_run fixture needs @pytest.mark.chaos" in out


# -- collection, without runs ---------------------------------------------------------------------------------------
def test_collects_experiments_only(pytester):
    for name, text in FILES.items():
        pytester.path.joinpath(name).write_text(text)
    pytester.path.joinpath("broken.yaml").write_text("name: x\nload: [unclosed\n")
    r = pytester.runpytest_inprocess("--chaos", ".", "--collect-only", "-q")
    ids = {line.strip() for line in r.outlines if "::" in line}
    assert ids == {"passes.yaml::passes", "fails.yaml::fails", "invalid.yaml::invalid", "broken.yaml::broken"}
    # a non-experiment named on its own is run, so `chaos run` says what it is instead of pytest's "not found"
    r = pytester.runpytest_inprocess("--chaos", "target.yaml", "--collect-only", "-q")
    assert {line.strip() for line in r.outlines if "::" in line} == {"target.yaml::target"}


def test_nothing_without_the_option(pytester):
    for name, text in FILES.items():
        pytester.path.joinpath(name).write_text(text)
    r = pytester.runpytest_inprocess("--collect-only", "-q")
    assert r.ret == pytest.ExitCode.NO_TESTS_COLLECTED, r.outlines
    bad = pytester.runpytest_inprocess("--chaos", ".", "--chaos-var", "USERS")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "write NAME=VALUE" in "\n".join(bad.errlines + bad.outlines)


def test_loading_the_plugin_imports_nothing_heavy():
    code = ("import sys, chaos.pytest_plugin\n"
            "heavy = [m for m in ('yaml', 'chaos.experiment', 'chaos.run', 'locust', 'torch') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the outcome of each exit code ----------------------------------------------------------------------------------
def _run(code, checks=(), reason=None, stderr="", stdout="", report=True):
    rep = {"verdict": "x", "exit_code": code, "reason": reason, "checks": list(checks)} if report else None
    return ChaosRun(Path("/e/x.yaml"), Path("/r/x-1"), code, rep, stdout, stderr)


def test_outcome_mapping():
    assert outcome(_run(0)) == ("passed", "")
    fail = {"name": "recovery time", "passed": False, "measured": "14.2 s", "threshold": "<= 10 s", "detail": "r1"}
    ok = {"name": "status codes", "passed": True, "measured": "200x9", "threshold": "only [200]", "detail": ""}
    kind, msg = outcome(_run(1, [fail, ok]))
    assert kind == "failed" and "FAIL  recovery time: measured 14.2 s, required <= 10 s — r1" in msg
    assert "status codes" not in msg and msg.endswith("report: /r/x-1/report.md")
    unjudged = {"name": "served by all", "passed": None, "measured": "-", "threshold": "all",
                "detail": "not judged: r1 came back 1 s before the end"}
    kind, msg = outcome(_run(4, [ok, unjudged], reason="nothing failed, but the run could not judge"))
    assert kind == "skipped" and "not judged: served by all: r1 came back 1 s before the end" in msg
    kind, msg = outcome(_run(3, reason="error rate 80% for 10 s"))
    assert kind == "failed" and "aborted by abort_when: error rate 80% for 10 s" in msg
    kind, msg = outcome(_run(2, stderr="Traceback?\nerror: x.yaml:3:1: load: missing\n", report=False))
    assert kind == "failed" and "error: x.yaml:3:1: load: missing" in msg and "Traceback" not in msg
    assert "run directory" not in msg  # an invalid file leaves no run directory to point at
    kind, msg = outcome(_run(2, stdout="error: target r0 did not become healthy in 60 s\n"))
    assert kind == "failed" and "did not become healthy" in msg
    kind, msg = outcome(_run(-9, stderr="line 1\nKilled\n", report=False))
    assert kind == "failed" and "exit code -9" in msg and "Killed" in msg
    kind, msg = outcome(_run(130))
    assert kind == "interrupted" and "chaos recover /r/x-1" in msg


def test_apply_outcome():
    apply_outcome(_run(0))
    with pytest.raises(pytest.skip.Exception, match="not judged"):
        apply_outcome(_run(4, reason="why"))
    with pytest.raises(pytest.exit.Exception) as e:
        apply_outcome(_run(130))
    assert e.value.returncode == 130
