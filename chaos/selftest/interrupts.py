"""`chaos selftest interrupts`: real runs of every fault family interrupted at seeded random moments, and what
each one left behind.

A trial starts one real command (`chaos run` on a short experiment of one family, `chaos gameday`, or
`chaos replay` with a target file it starts) and, at a moment drawn from the seed, sends it:
  - SIGINT to its process group, as Ctrl-C in a terminal does;
  - SIGTERM to its pid, as `kill` or a service manager does;
  - SIGKILL to its pid, as the OOM killer does; then `chaos recover` on what it left.
Then it checks what a user relies on after any interruption (each failure is a problem, named with its trial):
  - SIGINT/SIGTERM: the command ends by itself within HANG_S, exit 130 (or its verdict's, if the signal came once
    its work was done); SIGKILL: `chaos recover` exits 0;
  - no process of the run is left (every journaled pid, and whatever carries the run's mark CHAOS_RUN_ID), and
    none was left stopped (a paused replica);
  - a Toxiproxy server given by URL holds the proxies it held before, no more; no container of the run is left;
  - the journal reads whole (after SIGKILL its last line may be cut), starts with run_started, and every fault it
    says was applying was reverted, by the run or by recover;
  - the report exists and says interrupted (written by the run, or by recover after SIGKILL).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

from ..common import same_process
from ..rundir.files import JOURNAL, REPLAY_SUMMARY, REPORT_JSON, RESOLVED
from ..rundir.journal import Event, journaled_instances, journaled_processes, read_journal
from ..rundir.procs import marked, run_id_for
from .families import FAMILIES, Family, docker_target, stack_target, write_log

SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
HANG_S = 60.0     # still running this long after SIGINT/SIGTERM: it hangs
SETTLE_S = 20.0   # a process of the run still alive this long after it ended (or was recovered) is left behind
FINISHED = (0, 1, 3, 4)  # a signal that came after the work: the verdict's exit code stands
LONG_TRIALS = 60  # --long: every family under every signal, twice, and more


@dataclass(slots=True)
class Trial:
    n: int
    family: str
    signal: str
    at_s: float                       # the signal, seconds after the command started
    dir: str = ""
    phase: str = ""                   # the journal's last event when the signal came
    exit_code: int | None = None
    stop_s: float | None = None       # signal to exit (SIGINT, SIGTERM)
    recover_code: int | None = None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def plan(count: int, seed: int, families: list[str]) -> list[tuple[str, str, float]]:
    """(family, signal, at_s) per trial, in rounds: every family once a round, in a seeded order, its signal the
    next of SIGNALS each round, so each family meets every signal within three rounds; the moment uniform over
    the family's horizon."""
    rng = random.Random(seed)
    offset = rng.randrange(len(SIGNALS))
    out: list[tuple[str, str, float]] = []
    r = 0
    while len(out) < count:
        order = list(families)
        rng.shuffle(order)
        for i, f in enumerate(order[:count - len(out)]):
            sig = SIGNALS[(families.index(f) + r + offset) % len(SIGNALS)]
            out.append((f, sig, round(rng.uniform(0.3, FAMILIES[f].horizon_s), 2)))
        r += 1
    return out


def _chaos(*args, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _proxies(url: str) -> set[str]:
    with urllib.request.urlopen(url.rstrip("/") + "/proxies", timeout=5) as r:
        return set(json.loads(r.read()))


def _journals(d: str) -> list[str]:
    """Every run directory (a journal.jsonl) under d."""
    return sorted(root for root, _, files in os.walk(d) if JOURNAL in files)


def _last_event(d: str) -> str:
    newest = max(_journals(d), key=lambda p: os.path.getmtime(os.path.join(p, JOURNAL)), default=None)
    if newest is None:
        return "before the journal"
    events = read_journal(os.path.join(newest, JOURNAL))
    return events[-1]["event"] if events else "before the journal"


def _wait_until(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


class Interrupter:
    """Runs the trials in workdir; toxiproxy_url: the Toxiproxy API the toxics-url family uses."""

    def __init__(self, workdir: str, toxiproxy_url: str | None = None, settle_s: float = SETTLE_S):
        self.workdir = os.path.abspath(workdir)
        self.settle_s = settle_s
        os.makedirs(self.workdir, exist_ok=True)
        self.toxiproxy_url = toxiproxy_url
        self.log = write_log(os.path.join(self.workdir, "replay-log.jsonl"))

    def trial(self, n: int, family: Family, sig: str, at_s: float) -> Trial:
        t = Trial(n, family.name, sig, at_s, dir=os.path.join(self.workdir, f"{n:03d}-{family.name}-{sig}"))
        os.makedirs(t.dir)
        before = _proxies(self.toxiproxy_url) if family.needs == "toxiproxy" else set()
        proc = self._start(family, t.dir)
        try:
            self._interrupt(t, proc, sig, at_s)
        except KeyboardInterrupt:  # the user's Ctrl-C: passed on to the trial's command, which rolls back
            _ctrl_c(proc)
            raise
        finally:
            if proc.poll() is None:  # a hang, already a problem: never leave it
                proc.kill()
                proc.wait(10)
        if sig == "SIGKILL" or t.exit_code is None:
            self._after_kill(t)
        for run_dir in _journals(t.dir):
            t.problems += [f"{os.path.relpath(run_dir, t.dir)}: {p}" for p in self._check_run(run_dir, t)]
        if not _journals(t.dir):  # stopped before any journal: nothing of it may be left either
            left = [p for d in ("run", "replay") for p in marked(run_id_for(os.path.join(t.dir, d)))]
            t.problems += [f"pid {p.pid} carries the run's mark, with no journal" for p in left]
        if family.needs == "toxiproxy":
            extra = sorted(_proxies(self.toxiproxy_url) - before)
            if extra:
                t.problems.append(f"proxies left on {self.toxiproxy_url}: {', '.join(extra)}")
        if family.command == "gameday":
            t.problems += self._check_gameday(t)
        return t

    # -- one command, one signal ----------------------------------------------------------------------------------
    def _start(self, family: Family, d: str) -> subprocess.Popen:
        text = (family.text.replace("@LOG@", self.log).replace("@TOXIPROXY@", self.toxiproxy_url or "")
                .replace("@DOCKER@", docker_target() if family.needs == "docker" else "")
                .replace("@STACK@", stack_target() if family.needs == "engines" else ""))
        spec = os.path.join(d, "target.yaml" if family.command == "replay" else "experiment.yaml")
        with open(spec, "w") as f:
            f.write(text)
        if family.command == "run":
            args = ["run", spec, "--out", os.path.join(d, "run")]
        elif family.command == "gameday":
            with open(os.path.join(d, "suite.yaml"), "w") as f:
                f.write("name: torture\nexperiments:\n  - {file: experiment.yaml, name: first}\n"
                        "  - {file: experiment.yaml, name: second}\n")
            args = ["gameday", os.path.join(d, "suite.yaml"), "--out", os.path.join(d, "gameday")]
        else:
            args = ["replay", self.log, spec, "--speed", "1", "--out", os.path.join(d, "replay"), "--interval", "0"]
        out = open(os.path.join(d, "output.txt"), "wb")
        try:  # a session of its own, as a command started from a terminal is its group's leader
            return subprocess.Popen([sys.executable, "-m", "chaos", *args], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()

    def _interrupt(self, t: Trial, proc: subprocess.Popen, sig: str, at_s: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < at_s and proc.poll() is None:
            time.sleep(0.02)
        if proc.poll() is not None:
            t.phase, t.exit_code = "ended before the signal", proc.returncode
            return
        t.phase = _last_event(t.dir)
        sent = time.monotonic()
        try:
            if sig == "SIGINT":
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
            else:
                os.kill(proc.pid, getattr(signal, sig))
        except ProcessLookupError:
            pass
        try:
            t.exit_code = proc.wait(HANG_S if sig != "SIGKILL" else 10)
        except subprocess.TimeoutExpired:
            t.problems.append(f"still running {HANG_S:.0f} s after {sig}")
            return
        t.stop_s = round(time.monotonic() - sent, 3) if sig != "SIGKILL" else None
        if sig == "SIGKILL" or t.exit_code == 130 or t.exit_code in FINISHED and self._work_done(t.dir):
            return
        if t.exit_code == -getattr(signal, sig) and not _journals(t.dir):
            return  # the signal came while Python still imported: it died having started nothing (checked below)
        t.problems.append(f"exit {t.exit_code} after {sig} (expected 130)")

    @staticmethod
    def _work_done(d: str) -> bool:
        """Had every run under d finished its load (the signal then only cut its teardown short)?"""
        runs = _journals(d)
        return bool(runs) and all(any(e["event"] in (Event.LOAD_STOPPED, Event.RUN_FINISHED) for e in
                                      read_journal(os.path.join(r, JOURNAL))) for r in runs)

    def _after_kill(self, t: Trial) -> None:
        """What a user does after a SIGKILL: wait for any run that goes on by itself (a game day's experiment runs
        in a session of its own), then `chaos recover` each run directory."""
        for run_dir in _journals(t.dir):
            events = read_journal(os.path.join(run_dir, JOURNAL))
            started = next((e for e in events if e["event"] == Event.RUN_STARTED), {})
            if not _wait_until(lambda: not same_process(started.get("pid"), started.get("create_time")), HANG_S):
                t.problems.append(f"{os.path.relpath(run_dir, t.dir)}: its run still goes {HANG_S:.0f} s after")
                continue
            r = _chaos("recover", run_dir)
            t.recover_code = r.returncode if t.recover_code in (None, 0) else t.recover_code
            if r.returncode != 0:
                t.problems.append(f"chaos recover {os.path.relpath(run_dir, t.dir)} exited {r.returncode}: "
                                  f"{(r.stderr or r.stdout).strip()[-300:]}")

    # -- what must hold -----------------------------------------------------------------------------------------
    def _check_run(self, run_dir: str, t: Trial) -> list[str]:
        problems = []
        path = os.path.join(run_dir, JOURNAL)
        with open(path, "rb") as f:
            lines = [line for line in f.read().split(b"\n") if line.strip()]
        cut = [i + 1 for i, line in enumerate(lines) if not _parses(line)]
        if cut and not (t.signal == "SIGKILL" and cut == [len(lines)]):  # a SIGKILL may cut the last line only
            problems.append(f"journal lines {cut} do not parse")
        events = read_journal(path)
        if not events or events[0]["event"] != Event.RUN_STARTED:
            problems.append("the journal does not start with run_started")
        procs = journaled_processes(events)
        stopped = [pid for (pid, ct) in procs if _stopped(pid, ct)]
        if stopped:
            problems.append(f"left stopped (paused): pids {stopped}")
        run_id = next((e.get("run_id") for e in events if e.get("run_id")), run_id_for(run_dir))

        def alive() -> list[str]:
            out = [f"pid {pid} ({info.get('what')})" for (pid, ct), info in procs.items() if same_process(pid, ct)]
            return out + [f"pid {p.pid} (carries the mark)" for p in marked(run_id) if p.pid not in
                          {pid for pid, _ in procs}]

        if not _wait_until(lambda: not alive(), self.settle_s):
            problems.append(f"left running: {', '.join(alive())}")
        if not any(e["event"] == Event.RECOVERED for e in events):
            applied = [e["fault"] for e in events if e["event"] == Event.FAULT_APPLYING]
            reverted = {e["fault"] for e in events if e["event"] == Event.FAULT_REVERTED}
            if [f for f in applied if f not in reverted]:
                problems.append(f"faults never reverted: {[f for f in applied if f not in reverted]}")
        problems += _containers_left(events)
        problems += _hosts_left(events)
        problems += _report_problems(run_dir, t)
        return problems

    def _check_gameday(self, t: Trial) -> list[str]:
        states = [os.path.join(r, "gameday.json") for r, _, fs in os.walk(t.dir) if "gameday.json" in fs]
        if not states:
            return [] if t.phase in ("before the journal",) else ["no gameday.json"]
        doc = json.load(open(states[0]))
        if t.signal != "SIGKILL" and t.exit_code == 130 and doc.get("status") != "interrupted":
            return [f"gameday.json says {doc.get('status')!r}, not 'interrupted'"]
        return []


def _ctrl_c(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(HANG_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _stopped(pid: int, ctime) -> bool:
    import psutil

    try:
        return same_process(pid, ctime) and psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _hosts_left(events: list[dict]) -> list[str]:
    """Namespaces, veths, bridges (and with them the nftables tables and qdiscs in them) of the run's hosts."""
    tags = {(e.get("layout") or {}).get("tag") for e in events if e["event"] == Event.HOSTS_CREATING}
    if not tags - {None}:
        return []
    from ..netns import leftovers

    return [f"{what} left" for tag in sorted(tags - {None}) for what in leftovers(tag)]


def _containers_left(events: list[dict]) -> list[str]:
    ids = sorted({i["container"] for i in journaled_instances(events) if i.get("container")})
    if not ids:
        return []
    import docker

    client, out = docker.from_env(), []
    for c in ids:
        try:
            client.containers.get(c)
            out.append(f"container {c[:12]} left")
        except docker.errors.NotFound:
            pass
    return out


def _report_problems(run_dir: str, t: Trial) -> list[str]:
    path = os.path.join(run_dir, REPORT_JSON)
    if os.path.basename(run_dir) == "replay" or not os.path.exists(os.path.join(run_dir, RESOLVED)):
        path = os.path.join(run_dir, REPLAY_SUMMARY)
        if not os.path.exists(path):
            return ["no replay-summary.json"]
        doc = json.load(open(path))
        done = any(e["event"] == Event.LOAD_STOPPED for e in read_journal(os.path.join(run_dir, JOURNAL)))
        # interrupted, or written whole once every request was sent (the signal cut only the target's stop)
        return [] if doc.get("interrupted") or done else ["replay-summary.json does not say interrupted"]
    if not os.path.exists(path):
        return ["no report.json"]
    rep = json.load(open(path))
    verdict, code = rep.get("verdict"), rep.get("exit_code")
    if FAMILIES[t.family].command == "run" and t.signal != "SIGKILL":
        # the command's exit is its report's: interrupted, or the verdict of work done before the signal came
        if code != t.exit_code or (verdict == "interrupted") != (code == 130):
            return [f"report.json says {verdict!r} (exit {code}), the command exited {t.exit_code}"]
        return []
    events = read_journal(os.path.join(run_dir, JOURNAL))
    finished_first = [e["event"] for e in events if e["event"] in (Event.RUN_FINISHED, Event.RECOVERED)][:1] == ["run_finished"]
    if verdict == "interrupted" or code in FINISHED and finished_first:
        return []  # written by recover after the kill, or by the run that had finished (a game day's first)
    return [f"report.json says {verdict!r} (exit {code})"]
