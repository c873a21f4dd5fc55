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
    error: str = ""  # the last lines of stderr, for a setup error
    report: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return OUTCOME.get(self.exit_code, f"exit {self.exit_code}")

    def to_dict(self) -> dict:
        return {"name": self.name, "run_dir": self.run_dir, "exit_code": self.exit_code, "status": self.status,
                "seconds": round(self.seconds, 2), "target": self.target, "error": self.error}


def read_report(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "report.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def run_entry(entry: Entry, run_dir: str, target: str | None = None, progress=lambda line: None,
              timeout_s: float = 6 * 3600) -> Outcome:
    """`chaos run ENTRY --out RUN_DIR [--target T] [--var ...]` in a child; its outcome and report.
    A KeyboardInterrupt meanwhile is passed to the child; the outcome then says INTERRUPTED (once the child has
    rolled back and exited), and the caller, having recorded it, stops."""
    target = target or entry.target
    cmd = [sys.executable, "-m", "chaos", "run", entry.file, "--out", run_dir, "--json"]
    if target:
        cmd += ["--target", target]
    for k, v in entry.vars.items():
        cmd += ["--var", f"{k}={v}"]
    os.makedirs(os.path.dirname(os.path.abspath(run_dir)), exist_ok=True)
    t0 = time.monotonic()
    progress(f"{entry.name}: chaos run {entry.file}" + (f" --target {target}" if target else "")
             + f" -> {run_dir}")
    log_path = os.path.abspath(run_dir) + ".log"
    # Into a file, not a pipe: a run outlives a suite killed outright (its own session) and must not die of
    # writing to a closed pipe before it has rolled back.
    with open(log_path, "wb") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            child.wait(timeout=timeout_s)
        except KeyboardInterrupt:  # the run is passed the interrupt, rolls back, and reports exit 130
            _wait_after_interrupt(child)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)  # a run that outlived its bound still rolls back
            _wait_after_interrupt(child)
    code = child.returncode if child.returncode >= 0 else INTERRUPTED
    tail = _errors(log_path) if code not in (PASSED, FAILED, INCONCLUSIVE) else ""
    out = Outcome(entry.name, run_dir, code, time.monotonic() - t0, target, tail,
                  read_report(run_dir))
    progress(f"{entry.name}: {out.status} in {out.seconds:.0f} s" + (f" ({out.error})" if out.error else ""))
    return out


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


def _wait_after_interrupt(child: subprocess.Popen) -> None:
    """Pass the interrupt on and wait while the child rolls back; a second Ctrl-C here hurries it (its second
    signal), and only a child that outlives both is ended."""
    for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if sig is not None and child.poll() is None:
            child.send_signal(sig)
        try:
            child.wait(timeout=60 if sig is signal.SIGINT else 20)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            continue
