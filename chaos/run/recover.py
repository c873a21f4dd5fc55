"""`chaos recover RUN_DIR`: undo what a killed run left behind, from its journal alone."""

from __future__ import annotations

import os

from ..faults import FAULT_TYPES
from ..common import same_process, stop_group
from .journal import Journal, read_journal


class RecoverError(RuntimeError):
    pass


def recover(run_dir: str, log=print) -> list[str]:
    path = os.path.join(run_dir, "journal.jsonl")
    if not os.path.exists(path):
        raise RecoverError(f"{run_dir} has no journal.jsonl: is it a run directory (reports/NAME-TIME)?")
    events = read_journal(path)
    started = next((e for e in events if e["event"] == "run_started"), None)
    if started and same_process(started.get("pid"), started.get("create_time")):
        raise RecoverError(f"the run is still going (pid {started['pid']}); stop it with Ctrl-C (it rolls back "
                           f"by itself) or kill it, then run recover")
    done: list[str] = []
    # 1. Faults journaled as applying but never reverted: undo them from their journaled plan.
    reverted = {e["fault"] for e in events if e["event"] == "fault_reverted"}
    for e in events:
        if e["event"] == "fault_applying" and e["fault"] not in reverted:
            cls = FAULT_TYPES.get(e["type"])
            what = cls.undo_from_journal(e.get("plan") or {}) if cls else "unknown fault type"
            done.append(f"fault {e['fault']}: {what}")
    # 2. Every process the run started, newest knowledge last (restarts journal new pids).
    procs: dict[tuple, dict] = {}
    for e in events:
        if e["event"] in ("target_starting", "target_started", "fault_reverted"):
            for inst in e.get("instances") or []:
                if inst.get("pid"):
                    procs[(inst["pid"], inst.get("create_time"))] = {"what": f"instance {inst['id']}", **inst}
        if e["event"] == "load_started":
            for p in e.get("processes") or []:
                procs[(p["pid"], p.get("create_time"))] = {"what": "load generator", **p}
    for (pid, ctime), info in procs.items():
        if same_process(pid, ctime):
            stop_group(pid, ctime, grace=3.0)
            done.append(f"stopped {info['what']} (process group {pid})")
    containers = {(inst["container"], inst.get("engine")) for e in events for inst in (e.get("instances") or [])
                  if isinstance(inst, dict) and inst.get("container")}
    if containers:
        from ..targets.docker import remove_container
        for c, engine in containers:
            if remove_container(c, engine):
                done.append(f"removed container {c[:12]}")
    j = Journal(path)
    j.write("recovered", actions=done)
    j.close()
    return done
