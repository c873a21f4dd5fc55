"""A real `chaos run` interrupted at many moments: afterwards no fault is applied and no process is left."""

import signal
import subprocess
import sys
import time

import jsonschema
import pytest

from chaos.report.schema import REPORT

from .conftest import leftovers, report, start_run, stopped_processes, unreverted, wait_journal, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # each interrupts a whole run of its own; state, not time, is judged

# (signal, journal event to wait for, how many of it, extra delay)
MOMENTS = [
    (signal.SIGINT, "run_started", 1, 0.3),      # while the target starts
    (signal.SIGINT, "load_started", 1, 0.5),     # steady load, no fault yet
    (signal.SIGINT, "fault_applied", 1, 0.2),    # an instance paused
    (signal.SIGTERM, "fault_applied", 2, 0.2),   # paused + server hook on
    (signal.SIGINT, "fault_applied", 3, 0.3),    # paused + hook + an instance killed
    (signal.SIGTERM, "fault_reverted", 1, 0.0),  # during the restart
    (signal.SIGINT, "load_stopped", 1, 0.0),     # during teardown
]


def finish(proc, timeout=60):
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig,event,count,delay", MOMENTS, ids=[f"{s.name}-{e}{c}" for s, e, c, _ in MOMENTS])
def test_signal_rolls_back_everything(lifecycle_file, tmp_path, sig, event, count, delay):
    run_dir = tmp_path / "run"
    proc = start_run(lifecycle_file, run_dir)
    assert wait_journal(run_dir, event, count), proc.stdout.read() if proc.poll() is not None else "timeout"
    time.sleep(delay)
    proc.send_signal(sig)
    code = finish(proc)
    if event == "load_stopped":
        assert code in (0, 1, 130)  # the run may have finished its work already
    else:
        assert code == 130, proc.stdout.read()
    assert unreverted(run_dir) == []
    assert stopped_processes(run_dir) == []
    assert wait_until(lambda: leftovers(run_dir) == [], timeout=30), leftovers(run_dir)  # reaped, not a guess
    rep = report(run_dir)
    assert rep["exit_code"] == code and (rep["verdict"] == "interrupted" or code != 130)


def test_second_sigint_still_reverts(lifecycle_file, tmp_path):
    run_dir = tmp_path / "run"
    proc = start_run(lifecycle_file, run_dir)
    assert wait_journal(run_dir, "fault_applied", 2)
    proc.send_signal(signal.SIGINT)
    # The second Ctrl-C once the first was taken (the run says so), not after a guessed pause: two signals that
    # land before the handler runs are one.
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if '"event": "interrupt"' in line:
            break
    assert any('"event": "interrupt"' in line for line in seen), "".join(seen[-20:])
    proc.send_signal(signal.SIGINT)
    assert finish(proc) == 130
    out = "".join(seen) + proc.stdout.read()
    assert "again: reverting faster" in out, out[-3000:]
    assert unreverted(run_dir) == [] and stopped_processes(run_dir) == []
    assert wait_until(lambda: leftovers(run_dir) == [], timeout=30), leftovers(run_dir)


@pytest.mark.parametrize("event,count", [("target_started", 1), ("fault_applied", 1), ("fault_applied", 3)])
def test_sigkill_then_recover(lifecycle_file, tmp_path, event, count):
    run_dir = tmp_path / "run"
    proc = start_run(lifecycle_file, run_dir)
    assert wait_journal(run_dir, event, count)
    time.sleep(0.2)
    proc.kill()
    proc.wait(10)
    if event == "fault_applied":
        assert leftovers(run_dir), "a SIGKILLed run leaves its processes: that is what recover is for"
    r = subprocess.run([sys.executable, "-m", "chaos", "recover", str(run_dir)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert stopped_processes(run_dir) == []
    assert wait_until(lambda: leftovers(run_dir) == [], timeout=30), leftovers(run_dir)
    assert unreverted(run_dir) == []
    if count >= 1 and event == "fault_applied":
        assert "fault pause_instance#0" in r.stdout
    # The report the killed run could not write: interrupted, nothing judged, what recover did in its notes.
    rep = report(run_dir)
    jsonschema.validate(rep, REPORT)
    assert (rep["verdict"], rep["exit_code"], rep["checks"]) == ("interrupted", 137, [])
    assert any(n.startswith("recover: stopped instance") for n in rep["notes"]), rep["notes"]
    assert rep["timeline"][-1]["event"] == "recovered"
    if event == "fault_applied":
        assert len(rep["faults"]) >= count and all(f["reverted"] for f in rep["faults"])
        assert rep["faults"][0]["name"] == "pause_instance#0" and rep["faults"][0]["applied"]
    assert "# lifecycle: INTERRUPTED" in (run_dir / "report.md").read_text()
    assert (run_dir / "junit.xml").exists() and (run_dir / "report.html").exists()
