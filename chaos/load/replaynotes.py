"""What a replay's report says beyond latency: the scrub report (counts per kind, never values), the lines the
filter dropped, and the replayed requests that failed, by source line, so a failure traces back to the log."""

from __future__ import annotations

from .records import ERROR_OUTCOMES
from .replayopts import merge_counts

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
