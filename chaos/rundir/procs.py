"""Finding a run's processes after the fact: by what the journal says, and by the run-id mark each one carries.

Every process a run starts inherits CHAOS_RUN_ID=<absolute run directory> from the runner's environment, so one
that left its process group (a `setsid` double-fork in a process target's command) is still found by the mark.
A journaled pid is touched only while its start time still matches: a recycled pid is someone else's process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil

from ..common import same_process

RUN_ID_ENV = "CHAOS_RUN_ID"


def become_subreaper() -> None:
    """Orphans of our children re-parent to us, so a double-forking command cannot escape teardown."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def run_id_for(run_dir: str) -> str:
    """The mark of a run: its directory, absolute (unique while it holds a journal; runs refuse to share one)."""
    return os.path.abspath(run_dir)


def marked(run_id: str) -> list[psutil.Process]:
    """Live processes of this user whose environment carries run_id (zombies are dead already)."""
    out, uid, me = [], os.getuid(), os.getpid()
    for p in psutil.process_iter(["pid", "uids", "status"]):
        try:
            if p.pid == me or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get(RUN_ID_ENV) == run_id:
                out.append(p)
        except (psutil.Error, OSError):
            continue  # gone meanwhile, or its environment is not ours to read
    return out


def group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def group_is_ours(pgid: int, create_time: float | None, run_id: str | None) -> bool:
    """May we signal process group pgid? Yes while its leader is the process we journaled, or (leader gone)
    while a member still carries our run id (Linux keeps a pid unused while its group lives, so such a group is
    the one we started): a group formed later by a recycled pid is left alone."""
    if same_process(pgid, create_time):
        return True
    members = group_members(pgid)
    if not members or run_id is None:
        return False
    try:
        return any(m.environ().get(RUN_ID_ENV) == run_id for m in members)
    except (psutil.Error, OSError):
        return False


def stop_processes(procs: list[psutil.Process], grace: float = 3.0) -> list[psutil.Process]:
    """SIGCONT + SIGTERM each, SIGKILL what is left after grace; returns the ones that were alive."""
    alive = []
    for p in procs:
        try:
            p.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            p.terminate()
            alive.append(p)
        except psutil.Error:
            continue
    _, left = psutil.wait_procs(alive, timeout=grace)
    kill_processes(left)
    return alive


def kill_processes(procs: list[psutil.Process]) -> None:
    """SIGKILL each (gone already is fine) and reap them."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)


def stop_our_group(pgid: int, create_time: float | None, run_id: str | None, grace: float = 3.0) -> bool:
    """Stop group pgid if it is ours (see group_is_ours). True if anything of it was alive."""
    if not group_is_ours(pgid, create_time, run_id):
        return False
    members = group_members(pgid)
    try:
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return bool(members)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.05)
    if group_members(pgid):  # still the same group: it never emptied, so its pid cannot have been reused
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    psutil.wait_procs(members, timeout=3)
    return True
