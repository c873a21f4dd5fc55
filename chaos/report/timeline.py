"""One journal event as a reader wants it in a report's timeline: what happened, in words, without the fields only
`chaos recover` needs (process start times, the run's own folder, every instance's full record)."""

from __future__ import annotations


def _ids(instances) -> str:
    return ", ".join(str(i.get("id")) for i in instances or [] if isinstance(i, dict)) or "-"


def _links(links) -> str:
    out = []
    for link in links or []:
        if isinstance(link, dict):
            families = "+".join(link.get("families") or [])
            out.append(f"{link.get('link')} ({families}) in front of {', '.join(link.get('fronts') or [])}")
    return "; ".join(out)


def _error(e: dict) -> str:
    return f"; error: {e['error']}" if e.get("error") else ""


def _instance(e: dict) -> str:
    inst = e.get("instance") or {}
    what = f"{inst.get('id')}" + (f" pid {inst['pid']}" if inst.get("pid") else "")
    what += f" container {str(inst['container'])[:12]}" if inst.get("container") else ""
    return what + (" (restart)" if e.get("restart") else "")


DETAIL = {
    "run_started": lambda e: f"{e.get('experiment') or e.get('command', '')}, pid {e.get('pid')}",
    "target_starting": lambda e: f"{e.get('kind')}: {_ids(e.get('instances'))}",
    "target_started": lambda e: f"up: {_ids(e.get('instances'))}",
    "links": lambda e: _links(e.get("links")),
    "links_up": lambda e: _links(e.get("links")),
    "links_creating": lambda e: f"to make on {e.get('toxiproxy')}: {', '.join(map(str, e.get('proxies') or []))}",
    "links_removed": lambda e: "; ".join(map(str, e.get("problems") or [])),
    "process_started": _instance,
    "metrics_scraping": lambda e: f"/metrics of {_ids(e.get('instances'))} every {e.get('interval')}s "
                                  f"into {e.get('file')}",
    "host_sampling": lambda e: f"the host ({e.get('ncpu')} CPUs) every {e.get('interval')}s into {e.get('file')}",
    "load_started": lambda e: f"{e.get('plan')} load for {e.get('duration')}s "
                              f"(Locust pid {', '.join(str(p.get('pid')) for p in e.get('processes') or [])})",
    "load_stopped": lambda e: f"{e['records']} records" if "records" in e else
                              ("interrupted" if e.get("interrupted") else ""),
    "steady_state_ok": lambda e: str(e.get("detail", "")),
    "steady_state_failed": lambda e: str(e.get("detail", "")),
    "fault_applying": lambda e: f"{e.get('fault')} ({e.get('type')})",
    "fault_applied": lambda e: f"{e.get('fault')}: {e.get('description')}{_error(e)}",
    "fault_reverting": lambda e: f"{e.get('fault')} (a restart, in the background)",
    "fault_reverted": lambda e: f"{e.get('fault')}" + (" at the teardown" if e.get("teardown") else "") + _error(e),
    "final_health": lambda e: ", ".join(f"{k} {'healthy' if v else 'NOT healthy'}"
                                        for k, v in (e.get("health") or {}).items()),
    "abort": lambda e: str(e.get("reason", "")),
    "orphans_stopped": lambda e: f"pids {', '.join(map(str, e.get('pids') or []))}",
    "warm_imports": lambda e: f"waited {e.get('waited_s')}s for the checks' imports before the load",
    "run_finished": lambda e: f"{e.get('verdict')} (exit {e.get('exit_code')})",
}
QUIET = ("t", "event", "create_time", "run_dir", "run_id", "pgid")


def event_detail(e: dict, limit: int = 200) -> str:
    """The detail column of a timeline row."""
    make = DETAIL.get(e.get("event"))
    if make is not None:
        try:
            return make(e)[:limit]
        except (AttributeError, KeyError, TypeError, ValueError):
            pass  # an event written by another version: the generic form below
    d = ", ".join(f"{k}={v}" for k, v in e.items()
                  if k not in QUIET and v is not None and not isinstance(v, (dict, list)))
    return d[:limit]
