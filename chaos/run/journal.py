"""An append-only JSONL journal, fsynced per event: what a SIGKILLed run leaves for `chaos recover`."""

from __future__ import annotations

import json
import os
import threading
import time


class Journal:
    def __init__(self, path: str, scrub=None, clock=time.time):
        self.path = path
        self._clock = clock  # the runner's: the records' clock once the load runs, so the timeline lines up
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()  # restarts journal from their own thread: one whole line at a time
        self._scrub = scrub or (lambda rec: rec)  # secrets out before anything reaches the disk

    def write(self, event: str, **fields) -> dict:
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
    journal.write("process_started", instance={**inst.journal(), "pgid": pgid}, **fields)


def read_journal(path: str) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # the last line of a killed run may be cut
    return out
