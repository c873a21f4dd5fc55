"""`chaos recover RUN_DIR`: undo what a killed run left behind, from its journal and the run's mark.

Processes: every one the journal names (journaled the moment it was spawned, restarts included) is stopped with
its whole process group, but only while its start time matches: a recycled pid is another program's and is left
alone. Then every process of this user still carrying the run's mark (CHAOS_RUN_ID, inherited from the runner)
is stopped too: that finds what left its group (a `setsid` double-fork) or was spawned after the last journal line.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from ..common import count_lines, same_process
from ..errors import InputError
from ..faults import FAULT_TYPES
from ..rundir.files import JOURNAL, REPLAY_SUMMARY, REPORT_JSON, REQUESTS, RESOLVED
from ..targets.links import delete_journaled_proxies
from ..rundir.journal import Event, Journal, journaled_instances, journaled_processes, read_journal
from ..rundir.procs import marked, run_id_for, stop_our_group, stop_processes


class RecoverError(InputError, RuntimeError):
    pass


def recover(run_dir: str, log=print) -> list[str]:
    path = os.path.join(run_dir, JOURNAL)
    if not os.path.exists(path):
        raise RecoverError(f"{run_dir} has no journal.jsonl: is it a run directory (reports/NAME-TIME)?")
    events = read_journal(path)
    started = next((e for e in events if e["event"] == Event.RUN_STARTED), None)
    if started and same_process(started.get("pid"), started.get("create_time")):
        raise RecoverError(f"the run is still going (pid {started['pid']}); stop it with Ctrl-C (it rolls back "
                           f"by itself) or kill it, then run recover")
    run_id = (started or {}).get("run_id") or run_id_for(run_dir)
    done: list[str] = []
    # 1. Faults journaled as applying but never reverted: undo them from their journaled plan.
    reverted = {e["fault"] for e in events if e["event"] == Event.FAULT_REVERTED}
    for e in events:
        if e["event"] == Event.FAULT_APPLYING and e["fault"] not in reverted:
            cls = FAULT_TYPES.get(e["type"])
            what = cls.undo_from_journal(e.get("plan") or {}) if cls else "unknown fault type"
            done.append(f"fault {e['fault']}: {what}")
    # 2. Proxies the run made on the user's own Toxiproxy server (which recover must not stop): deleted, with their
    #    toxics. The bundled one and the LLM proxies are processes of the run, stopped below.
    if not any(e["event"] == Event.LINKS_REMOVED for e in events):
        for e in events:
            if e["event"] in (Event.LINKS_CREATING, Event.LINKS_CREATED):  # links_created: older journals, written after
                done += delete_journaled_proxies(e)
    # 3. Every process the journal names, by process group, if its start time still matches; all groups at once,
    #    so N of them that drain slowly cost one grace period, not N.
    # Each was started in its own session: its pid leads the group.
    groups = [(pid, ctime, info.get("pgid") or pid, info) for (pid, ctime), info in journaled_processes(events).items()]
    with ThreadPoolExecutor(max(1, len(groups)), thread_name_prefix="recover") as pool:
        stopped = list(pool.map(lambda g: stop_our_group(g[2], g[1], run_id), groups))
    for (pid, ctime, pgid, info), was_alive in zip(groups, stopped):
        if was_alive:
            done.append(f"stopped {info['what']} (process group {pgid})")
        elif _alive(pid) and not same_process(pid, ctime):
            done.append(f"left pid {pid} alone: it is another process now (the {info['what']}'s pid was reused)")
    # 4. Whatever still carries the run's mark.
    left = marked(run_id)
    if left:
        names = ", ".join(f"{p.pid} ({_name(p)})" for p in left)
        stop_processes(left)
        done.append(f"stopped {len(left)} process(es) carrying the run's mark outside the journaled groups: {names}")
    # 5. The hosts (network namespaces, veths, the bridge), once nothing of the run runs in them any more.
    if not any(e["event"] == Event.HOSTS_REMOVED for e in events):
        for e in events:
            if e["event"] == Event.HOSTS_CREATING:
                from ..netns import remove

                removed = remove(e.get("layout") or {})
                if removed:
                    done.append(f"removed {', '.join(removed)}")
    containers = {(i["container"], i.get("engine")) for i in journaled_instances(events) if i.get("container")}
    if containers:
        from ..targets.docker import remove_container
        for c, engine in containers:
            if remove_container(c, engine):
                done.append(f"removed container {c[:12]}")
    j = Journal(path)
    j.write(Event.RECOVERED, actions=done)
    j.close()
    if (started or {}).get("command") == "replay":
        if not os.path.exists(os.path.join(run_dir, REPLAY_SUMMARY)):
            _write_killed_replay(run_dir, done)
    elif not os.path.exists(os.path.join(run_dir, REPORT_JSON)):
        write_killed_report(run_dir, read_journal(path), done)
    return done


def _write_killed_replay(run_dir: str, actions: list[str]) -> None:
    """`chaos replay` killed: its summary says so, with what records it left (each names its source line)."""
    with open(os.path.join(run_dir, REPLAY_SUMMARY), "w") as f:
        records = count_lines(os.path.join(run_dir, REQUESTS))
        json.dump({"interrupted": True, "killed": True, "records": records,
                   "note": "killed before it could finish; `chaos recover` stopped what it started",
                   "recover": actions}, f, indent=2)


def write_killed_report(run_dir: str, events: list[dict], actions: list[str]) -> None:
    """The report a killed run could not write: interrupted, its faults and timeline from the journal, what recover
    did in its notes. Nothing is judged: the run never got to its end."""
    from ..report.writer import write_reports
    from ..verify.evidence import REPORT_VERSION

    try:
        with open(os.path.join(run_dir, RESOLVED)) as f:
            exp = json.load(f)
    except (OSError, ValueError):
        exp = {}
    target = exp.get("target") if isinstance(exp.get("target"), dict) else {}
    first = {}
    for e in events:
        first.setdefault((e["event"], e.get("fault")), e)
    faults = [{"name": e["fault"], "type": e.get("type"),
               "description": first.get(("fault_applied", e["fault"]), {}).get("description") or e.get("type"),
               "applied": ("fault_applied", e["fault"]) in first,
               "reverted": True,  # by the run, or just now by recover (its notes say which)
               "applied_at": first.get(("fault_applied", e["fault"]), {}).get("t"),
               "reverted_at": first.get(("fault_reverted", e["fault"]), {}).get("t"),
               "apply_error": first.get(("fault_applied", e["fault"]), {}).get("error"), "revert_error": None}
              for e in events if e["event"] == Event.FAULT_APPLYING]
    requests = count_lines(os.path.join(run_dir, REQUESTS))
    t0 = events[0]["t"] if events else None
    load = first.get(("load_started", None), {})
    report = {
        "report_version": REPORT_VERSION,
        "experiment": {"name": exp.get("name") or os.path.basename(os.path.abspath(run_dir)),
                       "description": exp.get("description"), "file": exp.get("path")},
        "verdict": "interrupted", "exit_code": 137,
        "reason": "killed before it could finish (SIGKILL, the OOM killer or a crash); `chaos recover` rolled back "
                  "what it left, and nothing was judged",
        "started": t0, "duration_s": (events[-1]["t"] - t0) if events else None, "load_started": load.get("t"),
        "target": {"kind": target.get("kind"), "name": target.get("name"), "model": target.get("model")},
        "checks": [], "steps": [], "faults": faults, "notes": [f"recover: {a}" for a in actions],
        "inputs": [], "requests": requests, "load": None, "timeline": events,
    }
    write_reports(run_dir, report, [])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _name(p) -> str:
    try:
        return p.name()
    except Exception:
        return "?"
