"""`chaos selftest hostile` end to end: real replicas and a real gateway, every case sent both ways."""

import json
import re
import subprocess
import sys

import pytest

from chaos.reference import launcher
from chaos.selftest import hostile
from chaos.selftest.cases import hostile_cases
from chaos.selftest.hostile import COUNTS, Tally, render
from tests.run.test_runs import measured


def skip_slow_health_on_a_busy_box(r, result) -> None:
    """/health answered 200 but over 1 s, and nothing else wrong, while other processes took over a third of this
    machine: the slowness is the machine's. The selftest leaves such a round unjudged when its idle canary was
    slow too; a canary that happened to be quick at that moment does not make the replica slow. Not judged."""
    total = result["total"]
    health = [f for f in result.get("findings", []) if "/health:" in f]
    others = [c for c in COUNTS if c not in ("requests", "health_failures") and total[c]]
    if (r.returncode == 1 and not others and len(health) == total["health_failures"]
            and all(re.search(r"/health: 200 after ", f) for f in health) and r.neighbours > 1 / 3):
        pytest.skip(f"other processes used {r.neighbours:.0%} of the machine; only slow /health answers: "
                    + "; ".join(health[:3]))


@pytest.mark.slow
def test_selftest_hostile_sends_every_case_both_ways_and_every_count_is_zero(tmp_path):
    out = tmp_path / "hostile.json"
    r = measured([sys.executable, "-m", "chaos", "selftest", "hostile", "--json", str(out)], timeout=600)
    if r.returncode == 1 and out.exists():
        skip_slow_health_on_a_busy_box(r, json.loads(out.read_text()))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    result = json.loads(out.read_text())
    n = len(hostile_cases())
    assert result["cases"] == n and result["direct"]["requests"] == n and result["gateway"]["requests"] == n
    assert all(result["total"][c] == 0 for c in COUNTS if c != "requests"), result
    assert "clean: every count is 0" in r.stdout


def test_a_finding_makes_the_run_not_clean_and_is_shown():
    t = Tally(requests=3, errors_5xx=1, findings=["r0: completions seed=1e30: 503 engine_dead"])
    assert not t.clean
    text = render({"cases": 3, "target": "x", "total": {c: getattr(t, c) for c in COUNTS}, "clean": t.clean,
                   "findings": t.findings})
    assert "NOT clean" in text and "! r0: completions seed=1e30" in text


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "http://127.attacker.example:8000"])
def test_a_non_loopback_url_is_refused(url):
    # 127.attacker.example is a name that resolves wherever its owner likes, however it begins
    r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "hostile", "--url", url],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not a loopback address" in r.stdout, r.stdout


def test_a_replica_that_fails_to_start_leaves_none_of_the_started_ones_running(monkeypatch):
    stopped = []

    class Started:
        def __init__(self, name):
            self.name = name

        def stop(self):
            stopped.append(self.name)

    def start_server(args):
        name = args[args.index("--replica-id") + 1]
        if name == "r2":
            raise launcher.LaunchError("r2 did not start")
        return Started(name)

    monkeypatch.setattr(launcher, "start_server", start_server)
    with pytest.raises(launcher.LaunchError):
        hostile.run_reference(3, "tiny", progress=lambda line: None)
    assert sorted(stopped) == ["r0", "r1"]


@pytest.mark.slow
def test_abnormal_adds_the_generated_inputs_judged_whole(tmp_path):
    """--abnormal: the generated abnormal inputs are sent too, all answered as a good server does; a case with no
    answer counts as wrong and 5xx, and an abnormal case's error.code is judged, not only its status."""
    server = launcher.start_server(["--preset", "tiny"])
    try:
        out = tmp_path / "r.json"
        r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "hostile", "--url", server.base_url,
                            "--abnormal", "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:]
        result = json.loads(out.read_text())
        assert result["cases"] == len(hostile_cases()) + len(hostile.abnormal_cases(0, "chaos-reference", 1024))
        assert result["total"]["wrong"] == 0
    finally:
        server.stop()
    case = hostile.abnormal_cases(0, "chaos-reference", 1024)[0]
    tally = Tally()
    wrong_code = {"error": {"message": "m", "type": "invalid_request_error", "param": "prompt", "code": "other"}}
    hostile.send_all(tally, [case], [("x", "http://127.0.0.1:9")], {}, lambda line: None)  # nothing listens: 9
    assert tally.errors_5xx == 1 and tally.wrong == 1
    assert hostile.check(case.__class__(case.name, case.method, case.path, case.body, case.headers, (400,),
                                        "prompt", code="empty_input"), 400, wrong_code)
