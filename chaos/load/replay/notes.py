"""What a replay's report says beyond latency: the scrub report (counts per kind, never values), the lines the
filter dropped, and the replayed requests that failed, by source line, so a failure traces back to the log."""

from __future__ import annotations

from ...records import ERROR_OUTCOMES, RequestRecord
from .opts import merge_counts

FAILED_NOTED = 10  # source lines named in the note; the JSON keeps FAILED_KEPT
FAILED_KEPT = 200


def _why(r) -> str:
    if r.outcome == "http_error":
        return " ".join(str(x) for x in (r.status, r.error_code) if x)
    if r.outcome == "timeout" and r.timeout_kind:
        return f"timeout {r.timeout_kind}"
    return r.outcome


def replay_facts(records, options=None, filtered: int | None = None) -> dict | None:
    """{"scrub": {kind: n, "total": n} | None, "filter": text | None, "filtered": n | None,
    "failed": {"count": n, "lines": [{"line", "outcome", "status", "error_code"}, ...]}} over the replayed
    records (those with a source_line); None when nothing was replayed."""
    replayed = [r for r in records if r.source_line is not None]
    if not replayed and options is None:
        return None
    scrub = None
    if options is not None and options.scrub:
        scrub = {}
        for r in replayed:
            merge_counts(scrub, r.scrubbed)
        scrub = dict(sorted(scrub.items()))
        scrub["total"] = sum(scrub.values())
    bad = sorted((r for r in replayed if r.outcome in ERROR_OUTCOMES), key=lambda r: (r.source_line, r.t_sched))
    flt = options.compiled() if options is not None else None
    return {"scrub": scrub, "filter": str(flt) if flt else None, "filtered": filtered if flt else None,
            "failed": {"count": len(bad), "lines": [
                {"line": r.source_line, "outcome": r.outcome, "status": r.status, "error_code": r.error_code,
                 "why": _why(r)} for r in bad[:FAILED_KEPT]]}}


def replay_notes(facts: dict | None) -> list[str]:
    if not facts:
        return []
    notes = []
    s = facts.get("scrub")
    if s is not None:
        kinds = ", ".join(f"{k} {v}" for k, v in s.items() if k != "total")
        notes.append(f"scrub: {s['total']} values redacted from the replayed requests before they were sent or "
                     f"stored ({kinds or 'none found'}); counts only, the values are kept nowhere")
    if facts.get("filter"):
        notes.append(f"replay filter {facts['filter']}: filtered: {facts.get('filtered') or 0} lines of the log "
                     f"(not sent, not counted as lost)")
    failed = facts.get("failed") or {}
    if failed.get("count"):
        notes.append("replayed requests that failed: " + failed_lines(failed))
    return notes


def failed_lines(failed: dict) -> str:
    """The first FAILED_NOTED failed requests as 'line N (why)', and how many more."""
    shown = failed["lines"][:FAILED_NOTED]
    more = failed["count"] - len(shown)
    return ", ".join(f"line {x['line']} ({x['why']})" for x in shown) + (f" ... and {more} more" if more > 0 else "")


def replay_order(records: list[RequestRecord]) -> int:
    """Replayed requests sent before one intended earlier (per process: each has its own clock anchor): sorted by
    intended time (then log line, the replay's own order for equal times), each actual send must not precede the
    previous one's."""
    by_worker: dict = {}
    for r in records:
        if r.source_line is not None:
            by_worker.setdefault(r.worker, []).append((r.t_sched, r.source_line, r.t_start))
    bad = 0
    for rows in by_worker.values():
        rows.sort()
        bad += sum(1 for a, b in zip(rows, rows[1:]) if b[2] < a[2])
    return bad


def format_replay(acc: dict) -> str:
    """The replay's first lines: a loss says so before anything else."""
    lines = []
    if acc.get("not_sent"):
        why = ", ".join(f"{k} {v}" for k, v in sorted(acc["not_sent_by_reason"].items()))
        lines.append(f"REPLAY INCOMPLETE: not sent: {acc['not_sent']} of {acc['window']} requests of the log window "
                     f"({why}); first lines not sent: {', '.join(map(str, acc['first_not_sent'][:10])) or '-'}")
    lag = acc.get("lag") or {}
    lag_text = "/".join(_ms(lag.get(k)) for k in ("p50", "p99", "max")) if lag else "-"
    lines.append(f"replay: sent {acc['sent']} of {acc['window']}, not sent: {acc['not_sent']}, "
                 f"out of order: {acc.get('out_of_order', '-')}, lag p50/p99/max {lag_text} ms"
                 + (f", skipped {acc['skipped']} unreadable lines" if acc.get("skipped") else "")
                 + (f", filtered: {acc['filtered']}" if acc.get("filtered") else "")
                 + (f", {acc['late_in_log']} lines out of order in the log itself" if acc.get("late_in_log") else ""))
    return "\n".join(lines)


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"
