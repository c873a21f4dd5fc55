"""An append-only JSONL journal, fsynced per event: the single record of a run, and what a SIGKILLed run leaves
for `chaos recover`. Every event's name is an Event; readers compare with the same names (a StrEnum equals its
string, so journals written before the enum read the same)."""

from __future__ import annotations

import enum
import json
import os
import threading
import time


class Event(enum.StrEnum):
    ABORT = "abort"
    FAULT_APPLIED = "fault_applied"
    FAULT_APPLYING = "fault_applying"
    FAULT_REVERTED = "fault_reverted"
    FAULT_REVERTING = "fault_reverting"
    FINAL_HEALTH = "final_health"
    HOST_SAMPLING = "host_sampling"
    HOSTS_CREATING = "hosts_creating"  # the hosts' layout (chaos.netns), journaled before any is made
    HOSTS_REMOVED = "hosts_removed"
    LINKS = "links"
    LINKS_CREATED = "links_created"  # older journals: written after the links were up
    LINKS_CREATING = "links_creating"
    LINKS_LEFT = "links_left"  # some proxies could not be removed: `chaos recover` tries again
    LINKS_REMOVED = "links_removed"
    LINKS_UP = "links_up"
    LOAD_STARTED = "load_started"
    LOAD_STOPPED = "load_stopped"
    METRICS_SCRAPING = "metrics_scraping"
    ORPHANS_STOPPED = "orphans_stopped"
    PROCESS_STARTED = "process_started"
    RECOVERED = "recovered"
    RUN_FINISHED = "run_finished"
    RUN_STARTED = "run_started"
    STEADY_STATE_FAILED = "steady_state_failed"
    STEADY_STATE_OK = "steady_state_ok"
    STOP_CONDITIONS = "stop_conditions"
    TARGET_STARTED = "target_started"
    TARGET_STARTING = "target_starting"
    TARGET_STOPPED = "target_stopped"
    WARM_IMPORTS = "warm_imports"


# The events that name the instances a run has, as spawned, started, or restarted by a fault's revert.
_INSTANCE_LISTS = (Event.TARGET_STARTING, Event.TARGET_STARTED, Event.FAULT_REVERTED)


class Journal:
    def __init__(self, path: str, scrub=None, clock=time.time):
        self.path = path
        self._clock = clock  # the runner's: the records' clock once the load runs, so the timeline lines up
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()  # restarts journal from their own thread: one whole line at a time
        self._scrub = scrub or (lambda rec: rec)  # secrets out before anything reaches the disk

    def write(self, event: Event, **fields) -> dict:
        rec = self._scrub({"t": round(self._clock(), 6), "event": event, **fields})
        line = json.dumps(rec, default=str) + "\n"
        with self._lock:
            if self._f.closed:
                return rec
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())
        return rec

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()


def journal_spawn(journal: Journal, inst, **fields) -> None:
    """A target's process (or container), journaled the moment it exists, before any health wait, with its
    process group: what `chaos recover` stops if the command is killed."""
    try:
        pgid = os.getpgid(inst.pid) if inst.pid else None
    except OSError:
        pgid = None
    journal.write(Event.PROCESS_STARTED, instance={**inst.journal(), "pgid": pgid}, **fields)


def read_journal(path: str) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # the last line of a killed run may be cut
    return out


def journaled_instances(events: list[dict]):
    """Every instance the journal names (as spawned, started, or restarted by a fault's revert)."""
    for e in events:
        if e["event"] == Event.PROCESS_STARTED and isinstance(e.get("instance"), dict):
            yield e["instance"]
        elif e["event"] in _INSTANCE_LISTS:
            yield from (i for i in e.get("instances") or [] if isinstance(i, dict))


def journaled_processes(events: list[dict]) -> dict[tuple, dict]:
    """(pid, start time) -> what it was, for every process the run journaled (restarts journal new pids)."""
    procs: dict[tuple, dict] = {}
    for inst in journaled_instances(events):
        if inst.get("pid"):
            # Merged: a later target_started or fault_reverted names the same process without the pgid that
            # its process_started journaled.
            known = procs.setdefault((inst["pid"], inst.get("create_time")), {"what": f"instance {inst['id']}"})
            known.update({k: v for k, v in inst.items() if v is not None})
    for e in events:
        if e["event"] == Event.LOAD_STARTED:
            for p in e.get("processes") or []:
                procs[(p["pid"], p.get("create_time"))] = {"what": "load generator", **p}
    return procs
