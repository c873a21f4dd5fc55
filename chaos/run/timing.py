"""Does the load outlast what the faults start? Warnings for `chaos validate`, `--dry-run` and the run itself.

A restarted instance needs its start-up (a reference replica: ~5 s alone here, 10-20 s on a loaded 2-core
machine) and then time to be routed requests before the load ends; otherwise served_by_all and the checks after
recovery cannot be judged.
"""

from __future__ import annotations

STARTUP_ESTIMATE_S = {"reference": 15.0, "process": 15.0, "docker": 20.0, "stack": 20.0}
ROUTING_ESTIMATE_S = 10.0  # the gateway's health probe and ejection, then a few requests


def restart_warnings(exp) -> list[str]:
    out = []
    total = exp.load_duration
    startup = STARTUP_ESTIMATE_S.get(exp.target.kind, 15.0)
    for f in exp.faults:
        restart_after = f.params.get("restart_after") if f.type == "kill_instance" else None
        if restart_after is None:
            continue
        restart_at = f.at + restart_after
        needed = restart_at + startup + ROUTING_ESTIMATE_S
        if restart_at >= total:
            out.append(f"fault {f.name}: the restart at {restart_at:g}s comes after the load ends ({total:g}s), so "
                       f"it never happens; checks that need the instance back are not judged")
        elif needed > total:
            out.append(f"fault {f.name}: the restart begins at {restart_at:g}s; with ~{startup:g}s to start and "
                       f"~{ROUTING_ESTIMATE_S:g}s to be routed requests, the load ({total:g}s) may end first and "
                       f"served_by_all is then not judged: make the load at least {needed:g}s")
    return out
