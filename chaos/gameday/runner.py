"""One game day: the suite's experiments one after another, each in its own run directory, then one combined report
and a row in the history.

Folder (--out, default gamedays/SUITE/):
    history.sqlite          every game day's key figures (chaos/gameday/history.py)
    .lock                   held while a game day runs: a second one refuses instead of overlapping
    20261204T030000Z/       one game day: gameday.json (its state, written after every experiment),
                            gameday.md, gameday.html, junit.xml, runs/EXPERIMENT/ (each `chaos run`'s folder)

A failed experiment does not stop the rest unless the suite (or the entry) says stop_on_failure. Ctrl-C stops
the running experiment (it rolls back and writes its partial report) and the game day, whose report lists what
did not run. A game day killed outright leaves gameday.json saying "running" with a dead pid: the next
`chaos gameday` reports it as killed, listing what it did not run, and `--resume` runs just those instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

import psutil

from ..errors import SetupError
from ..host import load_summary
from ..suite.execute import FAILED, INTERRUPTED, SETUP, Outcome, read_report, run_entry, write_state
from ..suite.model import Suite
from . import score as scoring
from .history import History
from .historyformat import check as check_history


class GamedayError(SetupError):
    pass


class Lock:
    """An exclusive flock on FOLDER/.lock, with the holder's pid written in it for the message."""

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, ".lock")
        self.fd: int | None = None

    def __enter__(self) -> Lock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise GamedayError(f"another game day of this suite is running (pid {holder}, lock {self.path}); "
                               f"wait for it, or give another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def stamp(t: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


def _alive(pid) -> bool:
    try:
        return psutil.pid_exists(int(pid)) and psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, ValueError, TypeError):
        return False


def unfinished(folder: str) -> list[str]:
    """Game days in folder whose state says running though their process is gone (killed), oldest first."""
    out = []
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name, "gameday.json")
        if os.path.exists(p):
            try:
                doc = json.load(open(p))
            except ValueError:
                continue
            if doc.get("status") == "running" and not _alive(doc.get("pid")):
                out.append(os.path.join(folder, name))
    return out


def _orphan(doc: dict) -> int | None:
    """The pid of a run a killed game day started that still runs (its own session: it finishes by itself)."""
    child = doc.get("child") or {}
    pid = child.get("pid")
    try:
        if pid and psutil.Process(pid).create_time() == child.get("create_time") and _alive(pid):
            return pid
    except psutil.Error:
        pass
    return None


def run_gameday(suite: Suite, folder: str, progress=print, resume: str | None = None) -> dict:
    """Run (or, resume=DIR, finish) one game day under the folder's lock; returns its gameday.json document."""
    resume = os.path.realpath(resume) if resume else None
    with Lock(folder):
        # a history this version cannot read is refused before hours of experiments that could not be kept in it
        check_history(os.path.join(folder, "history.sqlite"))
        for dead in unfinished(folder):
            doc = json.load(open(os.path.join(dead, "gameday.json")))
            if (pid := _orphan(doc)) is not None:
                raise GamedayError(f"{dead}: a killed game day's run is still running (pid {pid}); it rolls back "
                                   f"and ends by itself: wait for it, then run again")
            if os.path.realpath(dead) != resume:
                close_killed(dead, folder, progress)
        if resume:
            doc = json.load(open(os.path.join(resume, "gameday.json")))
            if doc.get("status") == "finished":
                raise GamedayError(f"{resume}: this game day finished; there is nothing to resume")
            day = resume
            if doc.get("history_id"):  # interrupted or reported killed before: its row is replaced when it ends
                hist = History(os.path.join(folder, "history.sqlite"))
                try:
                    hist.remove(doc.pop("history_id"))
                finally:
                    hist.close()
            progress(f"resuming {day}: {len(_todo(suite, doc))} experiment(s) to run")
        else:
            day = os.path.join(folder, stamp())
            while os.path.exists(day):  # two game days in one second: never mix their runs
                time.sleep(1)
                day = os.path.join(folder, stamp())
            os.makedirs(day)
            doc = {"suite": suite.name, "suite_file": os.path.abspath(suite.path), "dir": os.path.abspath(day),
                   "started": time.time(), "planned": [e.name for e in suite.entries], "runs": []}
        doc.update(status="running", pid=os.getpid())
        state = os.path.join(day, "gameday.json")
        write_state(state, doc)
        try:
            for e in _todo(suite, doc):
                run_dir = os.path.join(day, "runs", e.name)
                out = adopt(e, run_dir, progress) if resume else None
                if out is None:
                    if os.path.exists(run_dir):  # a killed game day's unfinished run: keep it, run again beside it
                        os.replace(run_dir, f"{run_dir}.killed-{stamp()}")
                    out = run_entry(e, run_dir, progress=progress, on_start=lambda pid: _started(doc, state, pid))
                doc["runs"] = [r for r in doc["runs"] if r["name"] != e.name] + [
                    {**out.to_dict(), "verdict": out.report.get("verdict"),
                     "score": scoring.experiment_score(out.exit_code, out.report)}]
                write_state(state, doc)
                doc.pop("child", None)
                write_state(state, doc)
                if out.exit_code == INTERRUPTED or out.interrupted:
                    raise KeyboardInterrupt
                if out.exit_code in (FAILED, SETUP) and e.stop_on_failure:
                    doc["stopped"] = f"{e.name} {out.status} and says stop_on_failure"
                    progress(f"stopping: {doc['stopped']}")
                    break
            doc["status"] = "finished"
        except KeyboardInterrupt:
            doc["status"] = "interrupted"
            raise
        except BaseException as e:
            doc.update(status="error", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            finish(doc, day, folder)
    return doc


def adopt(entry, run_dir: str, progress) -> Outcome | None:
    """A run a killed game day started finishes on its own (its own session): take its report as it is."""
    rep = read_report(run_dir)
    code = rep.get("exit_code")
    if code not in (0, 1, 3, 4):
        return None
    progress(f"{entry.name}: finished after the game day was killed; its report is taken as it is")
    return Outcome(entry.name, run_dir, code, float(rep.get("duration_s") or 0), entry.target, "", rep)


def _started(doc: dict, state: str, pid: int) -> None:
    """The running experiment's pid, so that a game day killed meanwhile knows its run still runs."""
    try:
        doc["child"] = {"pid": pid, "create_time": psutil.Process(pid).create_time()}
    except psutil.Error:
        return
    write_state(state, doc)


def _todo(suite: Suite, doc: dict):
    done = {r["name"] for r in doc.get("runs", []) if r.get("exit_code") != INTERRUPTED}
    return [e for e in suite.entries if e.name not in done]


def close_killed(day: str, folder: str, progress=print) -> None:
    """A game day that was killed: its report says so and what it did not run; its history row is written."""
    doc = json.load(open(os.path.join(day, "gameday.json")))
    doc["status"] = "killed"
    doc.pop("child", None)
    suite_names = doc.get("planned", [])
    done = {r["name"] for r in doc["runs"]}
    for name in suite_names:  # a run that finished by itself after the kill is taken as it is
        rep = read_report(os.path.join(day, "runs", name)) if name not in done else {}
        if rep.get("exit_code") in (0, 1, 3, 4):
            doc["runs"].append({"name": name, "run_dir": os.path.join(os.path.abspath(day), "runs", name),
                                "exit_code": rep["exit_code"], "status": rep.get("verdict"),
                                "seconds": float(rep.get("duration_s") or 0), "target": None, "error": "",
                                "interrupted": False, "verdict": rep.get("verdict"),
                                "score": scoring.experiment_score(rep["exit_code"], rep)})
    progress(f"{day}: a game day that was killed; reported with what it did not run "
             f"(`chaos gameday --resume {day}` would have finished it)")
    finish(doc, day, folder)


def finish(doc: dict, day: str, folder: str) -> None:
    """Score, history, reports. Runs also after Ctrl-C: nothing done is lost."""
    from .report import write_reports

    doc["finished"] = time.time()
    by_name = {r["name"]: r for r in doc["runs"]}
    doc["not_run"] = [n for n in doc["planned"] if n not in by_name]
    scores = [by_name[n]["score"] if n in by_name else 0.0 for n in doc["planned"]]
    doc["score"] = scoring.resilience_score(scores)
    doc["experiments"] = len(doc["planned"])
    doc["passed"] = sum(r.get("exit_code") == 0 for r in doc["runs"])
    figures, hosts = [], {}
    for r in doc["runs"]:
        rep = read_report(r["run_dir"])
        if rep:
            figures += scoring.key_figures(r["name"], rep)
            hosts[r["name"]] = load_summary(rep)
            r["host"] = hosts[r["name"]].to_dict() if hosts[r["name"]] else None
    hist = History(os.path.join(folder, "history.sqlite"))
    try:
        if not doc.get("history_id"):
            doc["history_id"] = hist.append({**doc, "dir": os.path.abspath(day)}, figures, hosts)
        series = hist.series()
        gamedays = hist.gamedays()
        all_hosts = hist.hosts()
    finally:
        hist.close()
    write_state(os.path.join(day, "gameday.json"), doc)
    write_reports(doc, day, series, gamedays, all_hosts)
