"""One experiment of a suite, run as `chaos run` runs it: a child process with its own run directory, so that its
rollback, signal handling and report are exactly a user's. The child has a session of its own, so a Ctrl-C (or
SIGTERM) of the suite is passed on to it exactly once: it rolls back and writes its partial report, and the suite
then stops too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..rundir.files import REPORT_JSON
from .model import Entry

# chaos run's exit codes (README)
PASSED, FAILED, SETUP, ABORTED, INCONCLUSIVE, INTERRUPTED = 0, 1, 2, 3, 4, 130
OUTCOME = {PASSED: "passed", FAILED: "failed", SETUP: "setup error", ABORTED: "aborted",
           INCONCLUSIVE: "inconclusive", INTERRUPTED: "interrupted"}


@dataclass(slots=True)
class Outcome:
    name: str
    run_dir: str
    exit_code: int
    seconds: float
    target: str | None = None
    error: str = ""  # the run's error lines, when it did not run to a verdict
    report: dict = field(default_factory=dict)
    interrupted: bool = False  # a Ctrl-C came while it ran: the caller stops after recording it

    @property
    def status(self) -> str:
        return OUTCOME.get(self.exit_code, f"exit {self.exit_code}")

    def to_dict(self) -> dict:
        return {"name": self.name, "run_dir": self.run_dir, "exit_code": self.exit_code, "status": self.status,
                "seconds": round(self.seconds, 2), "target": self.target, "error": self.error,
                "interrupted": self.interrupted}


def read_report(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, REPORT_JSON)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


ROLLBACK_BOUND_S = 600.0  # after an interrupt, how long a run may take to roll back before it is killed


def run_entry(entry: Entry, run_dir: str, target: str | None = None, progress=lambda line: None,
              timeout_s: float = 6 * 3600, on_start=lambda pid: None) -> Outcome:
    """`chaos run ENTRY --out RUN_DIR [--target T] [--var ...]` in a child; its outcome and report.
    A KeyboardInterrupt meanwhile is passed to the child; the outcome then says interrupted (once the child has
    rolled back and exited), and the caller, having recorded it, stops. on_start(pid): the child is running."""
    run_dir = os.path.abspath(run_dir)  # recorded in gate.json / gameday.json, read back from anywhere
    target = target or entry.target
    cmd = [sys.executable, "-m", "chaos", "run", entry.file, "--out", run_dir, "--json"]
    if target:
        cmd += ["--target", target]
    for k, v in entry.vars.items():
        cmd += ["--var", f"{k}={v}"]
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    t0 = time.monotonic()
    progress(f"{entry.name}: chaos run {entry.file}" + (f" --target {target}" if target else "")
             + f" -> {run_dir}")
    log_path = run_dir + ".log"
    # Into a file, not a pipe: a run outlives a suite killed outright (its own session) and must not die of
    # writing to a closed pipe before it has rolled back.
    with open(log_path, "wb") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        on_start(child.pid)
        interrupted = _wait(child, timeout_s, progress)
    code = child.returncode
    if code < 0:  # ended by a signal: ours (an interrupt passed on) or not (the OOM killer, a crash)
        code = INTERRUPTED if interrupted else 128 - code
    tail = _errors(log_path) if code not in (PASSED, FAILED, INCONCLUSIVE) else ""
    out = Outcome(entry.name, run_dir, code, time.monotonic() - t0, target, tail, read_report(run_dir),
                  interrupted)
    progress(f"{entry.name}: {out.status} in {out.seconds:.0f} s" + (f" ({out.error})" if out.error else ""))
    return out


def _wait(child: subprocess.Popen, timeout_s: float, progress) -> bool:
    """Wait for the child. Each Ctrl-C here is passed on as one SIGINT (its first starts the rollback, a second
    hurries it); a third kills it (`chaos recover RUN_DIR` undoes what it left). A run past its time bound gets
    one SIGINT. Nothing escalates by itself, except a rollback that outlives ROLLBACK_BOUND_S. Returns whether
    an interrupt came (also one that came as the child was exiting anyway)."""
    interrupts, rolling_back = 0, False
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
            return interrupts > 0
        except subprocess.TimeoutExpired:
            if not rolling_back:
                progress("the run passed its time bound: interrupting it (it rolls back)")
                child.send_signal(signal.SIGINT)
                rolling_back, deadline = True, time.monotonic() + ROLLBACK_BOUND_S
                continue
            child.kill()  # a rollback past its bound
            child.wait()
            return interrupts > 0
        except KeyboardInterrupt:
            interrupts += 1
            if child.poll() is not None:
                continue
            if interrupts <= 2:
                child.send_signal(signal.SIGINT)
                progress("interrupt passed to the run: it rolls back" + (" faster" if interrupts == 2 else "")
                         + " (Ctrl-C again to " + ("hurry it" if interrupts == 1 else "kill it") + ")")
            else:
                child.kill()
            rolling_back, deadline = True, time.monotonic() + ROLLBACK_BOUND_S


def write_state(path: str, doc: dict) -> None:
    """gate.json / gameday.json, replaced whole: a suite killed mid-write leaves the previous state, never half."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, default=float)
    os.replace(tmp, path)


def _errors(log_path: str) -> str:
    """The run's own error lines (`error: ...`), else the last lines of its log."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - 16384))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    errors = [x for x in lines if x.startswith("error:")]
    return "\n".join((errors or lines)[-5:])
