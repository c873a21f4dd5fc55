"""`chaos selftest interrupts`: the plan of the trials, the counts, and the short mode end to end (one real
trial of every family, each interrupted at its seeded moment, and everything checked after)."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from chaos.selftest.cli import render, tally
from chaos.selftest.families import FAMILIES
from chaos.selftest.interrupts import LONG_TRIALS, SIGNALS, Interrupter, Trial, plan


def test_the_plan_covers_every_family_and_signal_before_repeating_and_is_seeded():
    names = list(FAMILIES)
    p = plan(LONG_TRIALS, 3, names)
    pairs = len(names) * len(SIGNALS)
    assert LONG_TRIALS >= 50 and len(p) == LONG_TRIALS
    assert len({(f, s) for f, s, _ in p[:pairs]}) == pairs  # each pair once before any twice
    assert all(0.3 <= at <= FAMILIES[f].horizon_s for f, _, at in p)
    assert p == plan(LONG_TRIALS, 3, names) and p != plan(LONG_TRIALS, 4, names)
    short = plan(len(names), 0, names)  # the default: every family once, the signals spread over them
    assert sorted(f for f, _, _ in short) == sorted(names)
    spread = Counter(s for _, s, _ in short)
    assert set(spread) == set(SIGNALS) and max(spread.values()) - min(spread.values()) <= 1, spread


def test_the_counts_name_every_problem_with_its_trial():
    trials = [Trial(1, "llm", "SIGINT", 2.0, phase="fault_applied", exit_code=130, stop_s=0.4),
              Trial(2, "llm", "SIGKILL", 5.0, phase="load_started", exit_code=-9, recover_code=0),
              Trial(3, "toxics", "SIGTERM", 1.0, phase="target_starting", exit_code=130, stop_s=1.2,
                    problems=["run: left running: pid 7 (instance r0)"])]
    c = tally(trials, {"docker": "no engine"})
    assert (c["trials"], c["clean"], c["problems"], c["recovered"]) == (3, 2, 1, 1)
    assert c["by_family_signal"] == {"llm SIGINT": [1, 1], "llm SIGKILL": [1, 1], "toxics SIGTERM": [0, 1]}
    assert c["stop_s"] == {"n": 2, "median": 0.8, "max": 1.2, "max_by_family": {"llm": 0.4, "toxics": 1.2}}
    text = render(c)
    assert "2 of 3 trials clean, 1 problem(s)" in text and "skipped docker: no engine" in text
    assert "trial 3 (toxics SIGTERM at 1.0 s): run: left running: pid 7 (instance r0)" in text


# With the whole runs (~90 s), not beside them: it judges nothing by time but its 60 s hang bound, and the worker
# beside them carries the gate's runs and the soak (.ci/run's header has the two workers' sums).
@pytest.mark.slow
def test_one_interruption_of_every_family_leaves_nothing_behind(tmp_path):
    out, report = tmp_path / "trials", tmp_path / "interrupts.json"
    r = subprocess.run([sys.executable, "-m", "chaos", "selftest", "interrupts", "--seed", "1", "--out", str(out),
                        "--json", str(report)], capture_output=True, text=True, timeout=900)
    doc = json.loads(report.read_text()) if report.exists() else {}
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    c = doc["counts"]
    ran = {t["family"] for t in doc["trials"]}
    assert ran == set(FAMILIES) - set(c["skipped"]), (ran, c["skipped"])
    assert c["clean"] == c["trials"] == len(ran) and c["problems"] == 0
    assert {t["signal"] for t in doc["trials"]} == set(SIGNALS)
    assert c["recovered"] == sum(t["signal"] == "SIGKILL" and t["recover_code"] is not None for t in doc["trials"])
    assert f"{c['trials']} of {c['trials']} trials clean, 0 problem(s)" in r.stdout


def test_the_checks_catch_what_an_interruption_can_leave(tmp_path):
    """A run directory left as a broken rollback would leave it: the checks must name each thing (else every
    clean trial above would prove nothing)."""
    run_dir = tmp_path / "t" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "experiment.resolved.json").write_text('{"name": "x"}')
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    events = [{"t": 1.0, "event": "run_started", "pid": dead.pid, "create_time": 0.0, "run_id": str(run_dir)},
              {"t": 2.0, "event": "fault_applying", "fault": "slow", "type": "latency"},
              {"t": 2.1, "event": "fault_applied", "fault": "slow"}]
    text = "".join(json.dumps(e) + "\n" for e in events)
    (run_dir / "journal.jsonl").write_text(text + '{"t": 3.0, "event": "fau')  # cut by the kill
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                              env={**os.environ, "CHAOS_RUN_ID": str(run_dir)})
    try:
        it = Interrupter(str(tmp_path / "w"), settle_s=0.5)
        found = it._check_run(str(run_dir), Trial(1, "toxics", "SIGINT", 1.0, exit_code=130))
        assert any(p.startswith("journal lines [4] do not parse") for p in found), found
        assert f"left running: pid {orphan.pid} (carries the mark)" in found, found
        assert "faults never reverted: ['slow']" in found and "no report.json" in found, found
        # after a SIGKILL the last line may be cut; the rest still counts
        killed = it._check_run(str(run_dir), Trial(2, "toxics", "SIGKILL", 1.0, exit_code=-9))
        assert not any("do not parse" in p for p in killed) and "no report.json" in killed, killed
    finally:
        orphan.kill()
        orphan.wait(10)
    (run_dir / "journal.jsonl").write_text(text + json.dumps({"t": 4.0, "event": "recovered", "actions": []}) + "\n")
    (run_dir / "report.json").write_text('{"verdict": "passed", "exit_code": 0}')
    assert it._check_run(str(run_dir), Trial(3, "toxics", "SIGINT", 1.0, exit_code=0)) == []  # done before it
    found = it._check_run(str(run_dir), Trial(4, "toxics", "SIGINT", 1.0, exit_code=130))
    assert found == ["report.json says 'passed' (exit 0), the command exited 130"], found
    found = it._check_run(str(run_dir), Trial(5, "gameday", "SIGKILL", 1.0, exit_code=-9))
    assert found == ["report.json says 'passed' (exit 0)"], found  # recovered before any run_finished
