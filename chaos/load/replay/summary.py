"""The summary of a one-off replay (`chaos replay`): what was sent and what was not, line by line where it matters.
Used by chaos.plan.replaycli only (it reads the load's records and summary.json)."""

from __future__ import annotations

import json
import os


def build_summary(result, log: str, target: str, window: int | None, unreadable: dict | None) -> dict:
    """window/unreadable: --fast's own count (None for a timed replay, whose account has them)."""
    from ...records import read_records

    with open(os.path.join(result.out_dir, "summary.json")) as f:
        load = json.load(f)
    records = read_records(result.records_path)
    replayed = [r for r in records if r.source_line is not None]
    statuses: dict = {}
    outcomes: dict = {}
    for r in replayed:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        key = str(r.status) if r.status is not None else "none"
        statuses[key] = statuses.get(key, 0) + 1
    acc = result.replay
    if acc is not None:
        if len(replayed) > acc["sent"] and result.interrupted:  # killed before its account was closed: the records
            acc = {**acc, "sent": min(len(replayed), acc["window"])}  # say what went out
            acc["not_sent"] = acc["window"] - acc["sent"]
            acc["not_sent_by_reason"] = {"interrupted": acc["not_sent"]} if acc["not_sent"] else {}
        out = {"mode": "timed", "window": acc["window"], "sent": acc["sent"], "not_sent": acc["not_sent"],
               "not_sent_by_reason": acc["not_sent_by_reason"], "first_not_sent": acc["first_not_sent"],
               "unreadable": acc["skipped"], "unreadable_lines": acc["skipped_lines"],
               "filtered": acc.get("filtered", 0), "out_of_order": acc.get("out_of_order"),
               "late_in_log": acc.get("late_in_log", 0), "lag": acc.get("lag") or result.overall.lag}
    else:
        sent = len({r.source_line for r in replayed})
        lost = max(0, window - sent)
        out = {"mode": "fast", "window": window, "sent": min(sent, window), "not_sent": lost,
               "not_sent_by_reason": {"interrupted" if result.interrupted else "not sent": lost} if lost else {},
               "first_not_sent": [], "unreadable": unreadable["count"], "unreadable_lines": unreadable["lines"],
               "filtered": (load.get("replay_filter") or {}).get("filtered", 0), "out_of_order": None,
               "late_in_log": 0, "lag": result.overall.lag}
    failed = load.get("replay_failed") or {"count": 0, "lines": []}
    return {"log": log, "target": target, **out, "outcomes": dict(sorted(outcomes.items())),
            "status_codes": dict(sorted(statuses.items())), "failed": failed, "scrub": load.get("scrub"),
            "filter": (load.get("replay_filter") or {}).get("filter"), "interrupted": result.interrupted}


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def format_summary(s: dict) -> str:
    lines = []
    if s["not_sent"]:
        why = ", ".join(f"{k} {v}" for k, v in sorted(s["not_sent_by_reason"].items()))
        first = ", ".join(map(str, s["first_not_sent"][:10]))
        lines.append(f"REPLAY INCOMPLETE: not sent {s['not_sent']} of {s['window']} ({why})"
                     + (f"; first lines not sent: {first}" if first else ""))
    unreadable = (f" (lines {', '.join(map(str, s['unreadable_lines']))}"
                  + (" ..." if s["unreadable"] > len(s["unreadable_lines"]) else "") + ")"
                  if s["unreadable"] else "")
    lines.append(f"sent {s['sent']} of {s['window']}, not sent {s['not_sent']}, filtered {s['filtered']}, "
                 f"unreadable lines {s['unreadable']}{unreadable}")
    lag = s.get("lag") or {}
    lines.append(f"lag (actual - intended send) p50/p99/max: {_ms(lag.get('p50'))}/{_ms(lag.get('p99'))}/"
                 f"{_ms(lag.get('max'))} ms" + (f", out of order: {s['out_of_order']}"
                                                if s.get("out_of_order") is not None else ""))
    lines.append("outcomes: " + (", ".join(f"{k} {v}" for k, v in s["outcomes"].items()) or "-")
                 + "; status codes: " + (", ".join(f"{k}x{v}" for k, v in s["status_codes"].items()) or "-"))
    failed = s["failed"]
    if failed.get("count"):
        from .notes import failed_lines

        lines.append(f"failed requests by source line ({failed['count']}): {failed_lines(failed)}")
    else:
        lines.append("failed requests: none")
    if s.get("scrub") is not None:
        lines.append("scrubbed: " + ", ".join(f"{k} {v}" for k, v in s["scrub"].items()))
    return "\n".join(lines)
