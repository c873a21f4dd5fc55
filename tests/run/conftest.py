import contextlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from chaos.common import same_process
from chaos.rundir.journal import read_journal

LIFECYCLE = """\
name: lifecycle
description: a short run with every kind of fault, for interrupting at many moments
target: {kind: reference, replicas: 2, preset: tiny, startup_timeout: 30s}
load:
  workload: chat
  users: 3
  duration: 8s
  output_tokens: 8-16
  timeouts: {connect: 2s, first_token: 5s, total: 10s}
faults:
  - {type: pause_instance, at: 1s, instance: 0, duration: 4s}
  - {type: server_hook, at: 1.5s, instance: 1, step_delay_ms: 20, duration: 4s}
  - {type: kill_instance, at: 3s, instance: 1, signal: SIGKILL, restart_after: 2s}
verify:
  status_codes: {allowed: [200]}
"""


def wait_until(pred, timeout=60.0, step=0.05) -> bool:
    """Poll pred until it holds or timeout s pass: for a state, never a guessed time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


@pytest.fixture
def lifecycle_file(tmp_path):
    p = tmp_path / "lifecycle.yaml"
    p.write_text(LIFECYCLE)
    return str(p)


def start_run(exp_file, run_dir, *extra, env=None):
    return subprocess.Popen([sys.executable, "-m", "chaos", "run", exp_file, "--out", str(run_dir), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})


def wait_journal(run_dir, event, count=1, timeout=60):
    path = os.path.join(run_dir, "journal.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            if sum(1 for e in read_journal(path) if e["event"] == event) >= count:
                return True
        time.sleep(0.05)
    return False


def started_processes(run_dir) -> list[tuple[int, float]]:
    """Every process the journal says the run started."""
    out = []
    path = os.path.join(run_dir, "journal.jsonl")
    for e in read_journal(path) if os.path.exists(path) else []:
        for inst in e.get("instances") or ([e["instance"]] if isinstance(e.get("instance"), dict) else []):
            if inst.get("pid"):
                out.append((inst["pid"], inst.get("create_time")))
        for p in e.get("processes") or []:
            out.append((p["pid"], p.get("create_time")))
    return out


def writers(run_dir, name: str | None = None) -> list[int]:
    """Live processes whose stdout is a file in run_dir (name: that file): every process a run starts logs
    there, so this finds them whatever the journal says."""
    base = os.path.abspath(run_dir)
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            out_file = os.readlink(f"/proc/{p.pid}/fd/1")
        except (psutil.Error, OSError):
            continue
        if out_file == os.path.join(base, name) if name else out_file.startswith(base + os.sep):
            out.append(p.pid)
    return out


def leftovers(run_dir) -> list[str]:
    """Processes of this run still alive: journaled ones, any Locust process configured for run_dir, any process
    logging into run_dir, and any carrying the run's mark (CHAOS_RUN_ID, the run directory)."""
    alive = [f"pid {pid}" for pid, ct in started_processes(run_dir) if same_process(pid, ct)]
    marker = os.path.abspath(run_dir)
    logging_here = set(writers(run_dir))
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            env, cmd = p.environ(), " ".join(p.cmdline()[:6])
        except psutil.Error:
            continue
        if env.get("CHAOS_LOAD_CONFIG", "").startswith(marker):
            alive.append(f"locust pid {p.pid}")
        elif env.get("CHAOS_RUN_ID") == marker or p.pid in logging_here:
            alive.append(f"pid {p.pid} ({cmd})")
    return alive


def stopped_processes(run_dir) -> list[int]:
    out = []
    for pid, ct in started_processes(run_dir):
        try:
            if same_process(pid, ct) and psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                out.append(pid)
        except psutil.Error:
            pass
    return out


def unreverted(run_dir) -> list[str]:
    events = read_journal(os.path.join(run_dir, "journal.jsonl"))
    if any(e["event"] == "recovered" for e in events):
        return []
    applied = {e["fault"] for e in events if e["event"] == "fault_applying"}
    reverted = {e["fault"] for e in events if e["event"] == "fault_reverted"}
    return sorted(applied - reverted)


def report(run_dir) -> dict:
    return json.load(open(os.path.join(run_dir, "report.json")))


SPIN = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def spinning(n: int):
    """n processes that each keep one core busy (bounded: 300 s), stopped when the block ends. Yields them
    (psutil.Process), so a test can tell their CPU from the neighbours' (spinner_seconds)."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield [psutil.Process(p.pid) for p in spinners]
    finally:
        for p in spinners:
            p.kill()
            p.wait(10)


def spinner_seconds(spinners) -> float:
    """CPU seconds the spinners have used so far (read while they live: a reaped one's are gone)."""
    total = 0.0
    for p in spinners:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total
