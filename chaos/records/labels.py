"""Fault labels on request records: which fault of an LLM fault proxy a request met.

The proxy sits between the load and the target. A response it altered or made up carries
`x-chaos-fault: <rule name>; <effect>`; the load user copies that onto the record as each attempt ends
(merge_header). A request the proxy closed, reset or held gets no response and so no header: for those its JSONL
log, one line per request it touched, names the rule by the request's x-request-id, which the load sends as the
record's id on every attempt (retries included). label_records reads those logs after the run.

A record's `fault` is one label, or several distinct ones joined with ", " in the order met (a retry that was
not hit keeps the earlier hit; a response two rules acted on has two headers): "name; effect" from the header,
"name; effect; detail" from the log.
"""

from __future__ import annotations

import json

from .record import RequestRecord

FAULT_HEADER = "x-chaos-fault"
SEPARATOR = ", "


def merge_fault(current: str | None, label: str | None) -> str | None:
    """current with label added, unless label is empty or already there."""
    label = (label or "").strip()
    if not label:
        return current
    if not current:
        return label
    return current if label in split_labels(current) else current + SEPARATOR + label


def merge_header(current: str | None, headers) -> str | None:
    """current with the labels of a response's x-chaos-fault headers added. The proxy sends one header per rule
    that acted; a client's headers object may give several as a list (geventhttpclient), or joined by ", "."""
    if headers is None:
        return current
    getlist = getattr(headers, "getlist", None)
    values = getlist(FAULT_HEADER) if getlist is not None else headers.get(FAULT_HEADER)
    if isinstance(values, str):
        values = [values]
    for value in values or ():
        for label in split_labels(value if isinstance(value, str) else None):
            current = merge_fault(current, label)
    return current


def split_labels(fault: str | None) -> list[str]:
    """The labels of a record's fault. A detail may itself hold ", ": a piece without "; " (no name and effect
    of its own) continues the label before it."""
    out: list[str] = []
    for piece in (fault or "").split(SEPARATOR):
        if out and "; " not in piece:
            out[-1] += SEPARATOR + piece
        elif piece.strip():
            out.append(piece.strip())
    return out


def rule_and_effect(label: str) -> str:
    """"name; effect" of a label, without the log's detail: what a summary groups by."""
    return "; ".join(part.strip() for part in label.split(";", 2)[:2])


def label_records(records: list[RequestRecord], log_paths: list[str]) -> int:
    """Fill `fault` from the proxy logs for records that have none yet; returns how many it labelled.

    A missing log is skipped (a proxy that touched nothing may not have written one), and so is any line that
    is not a whole JSON object with a request_id and a fault: the last one of a proxy killed mid-write is cut.
    Logs are read a line at a time and only ids of unlabelled records are kept, so a long run's log is fine."""
    wanted = {r.id: r for r in records if not r.fault}
    if not wanted:
        return 0
    found: dict[str, str] = {}
    for path in log_paths:
        try:
            f = open(path, "rb")
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
        with f:
            for line in f:
                label, rid = _log_label(line)
                if label is not None and rid in wanted:
                    found[rid] = merge_fault(found.get(rid), label)
    for rid, label in found.items():
        wanted[rid].fault = label
    return len(found)


def _log_label(line: bytes) -> tuple[str | None, str | None]:
    """("name; effect[; detail]", request_id) of one log line, or (None, None) when it cannot be read."""
    try:
        entry = json.loads(line)
    except ValueError:  # UnicodeDecodeError is one too
        return None, None
    if not isinstance(entry, dict):
        return None, None
    rid, fault = entry.get("request_id"), entry.get("fault")
    if not isinstance(rid, str) or not isinstance(fault, str) or not fault.strip():
        return None, None
    effect, detail = (str(entry.get(k) or "").strip() for k in ("effect", "detail"))
    return "; ".join([fault.strip(), effect or "-"] + ([detail] if detail else [])), rid
