"""A load spread over Locust workers on several hosts (docs/hosts.md, docs/scale.md): each worker's clock set onto
the master's, and workers the master lost.

Clocks. On one machine every process shares CLOCK_MONOTONIC, and the driver hands its anchor down
(chaos.load.clock): every record is on one timeline exactly. Hosts of a real fleet have clocks of their own, off
by NTP's error and more. So each worker, at its start, asks the master's clock a few times over the same channel
its records take (Locust's messages): it sends t1, the master answers with its time t2 (= t3, it answers at
once), the worker reads t4 on arrival. As NTP does, the offset of the master's clock from the worker's is
((t2 - t1) + (t3 - t4)) / 2, within half the round trip (t4 - t1) - (t3 - t2) whatever the path's asymmetry; of
several exchanges the one with the shortest round trip is kept. The worker shifts every record by that offset
before it sends it: the records of every host land on the master's timeline, and each worker's offset and its
bound go in clock-offsets.json beside the records.

Lost workers. A worker whose host is cut off sends nothing more, and the master goes on with the others. What the
records show is which worker's requests stop, and when: silent_workers says so, for the run's notes.
"""

from __future__ import annotations

import json
import os

PING, PONG, RESULT = "chaos_clock_ping", "chaos_clock_pong", "chaos_clock_result"
EXCHANGES = 5
WAIT_S = 2.0  # a worker holds its records this long at most for its offset (a master of an older version: none)
OFFSETS_FILE = "clock-offsets.json"
SKEW_ENV = "CHAOS_CLOCK_SKEW_S"  # tests: a worker's clock set off by this much, as another host's would be


def estimate(samples: list[tuple[float, float, float, float]]) -> dict:
    """{offset, bound, exchanges} from (t1, t2, t3, t4) exchanges: the master's clock minus the worker's, from the
    exchange of the shortest round trip, and its bound (half that round trip)."""
    if not samples:
        raise ValueError("no exchange to estimate a clock offset from")
    t1, t2, t3, t4 = min(samples, key=lambda s: (s[3] - s[0]) - (s[2] - s[1]))
    rtt = (t4 - t1) - (t3 - t2)
    return {"offset": ((t2 - t1) + (t3 - t4)) / 2, "bound": max(0.0, rtt) / 2, "exchanges": len(samples)}


TIMES = ("t_sched", "t_start", "t_first", "t_end")


def shift(rec, offset: float):
    """A record's timestamps moved onto the master's clock (intervals are unchanged)."""
    for name in TIMES:
        v = getattr(rec, name, None)
        if v is not None:
            setattr(rec, name, v + offset)
    return rec


def write_offset(out_dir: str, worker: str, found: dict) -> None:
    path = os.path.join(out_dir, OFFSETS_FILE)
    try:
        with open(path) as f:
            have = json.load(f)
    except (OSError, ValueError):
        have = {}
    have[worker] = found
    with open(path, "w") as f:
        json.dump(have, f, indent=2, sort_keys=True)


def read_offsets(out_dir: str) -> dict:
    try:
        with open(os.path.join(out_dir, OFFSETS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def offsets_note(offsets: dict, workers: int) -> str | None:
    """One line for the run's notes: each worker's clock offset from the master's, and its bound."""
    if not workers:
        return None
    said = [f"{w} {o['offset'] * 1000:+.2f} ms (± {o['bound'] * 1000:.2f} ms, {o['exchanges']} exchanges)"
            for w, o in sorted(offsets.items())]
    missing = [f"w{i}" for i in range(workers) if f"w{i}" not in offsets]
    text = "worker clocks set onto the master's: " + ("; ".join(said) or "none measured")
    if missing:
        text += f"; not measured for {', '.join(missing)} (their records are on their own clocks)"
    return text


def silent_workers(records, workers: int, t_start: float, t_end: float, places: dict | None = None,
                   quiet_s: float | None = None) -> list[str]:
    """Notes on each worker that sent no record for its last stretch of the load (quiet_s, by default a fifth
    of it and at least 5 s): lost by the master (its host cut off, or it died), its requests missing from then
    on. Records name their worker: the others' are all there."""
    if workers < 2:
        return []
    span = max(0.0, t_end - t_start)
    quiet = quiet_s if quiet_s is not None else max(5.0, span / 5)
    last: dict[str, float] = {}
    count: dict[str, int] = {}
    for r in records:
        w = getattr(r, "worker", None)
        if w is None:
            continue
        last[w] = max(last.get(w, t_start), (r.t_end or r.t_start) or t_start)
        count[w] = count.get(w, 0) + 1
    out = []
    for i in range(workers):
        w = f"w{i}"
        at = last.get(w)
        if at is None or t_end - at > quiet:
            where = f" (host {places[w]})" if places and w in places else ""
            since = "sent no record at all" if at is None else f"sent no record after {at - t_start:.1f} s"
            others = ", ".join(f"{k} {v:,}" for k, v in sorted(count.items()))
            out.append(f"Locust worker {w}{where} {since} of {span:.0f} s: the master lost it (its host cut off, "
                       f"or it died) and the load went on without it; the requests it would have sent are missing "
                       f"(records by worker: {others or 'none'})")
    return out
