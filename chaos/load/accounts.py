"""A timed replay's accounts: what each Locust process did with its share of the log window (replay-<worker>.json),
and one account for the run. Every request of the window is sent or not sent, with why."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

NOT_SENT_REASONS = {
    "duration": "its intended time fell after the plan's duration",
    "interrupted": "the run was stopped (or a process ended) before its time",
}


@dataclass(slots=True)
class ReplayAccount:
    """What one Locust process did with its share of a timed replay's window (replay-<worker>.json): every
    request of the window is sent or not sent, with why; unreadable lines are skipped and listed by line."""

    worker: str
    window: int = 0  # requests of the log window this process owes
    sent: int = 0
    not_sent: dict = field(default_factory=dict)  # reason (NOT_SENT_REASONS) -> count
    first_not_sent: list = field(default_factory=list)  # up to 20 log lines not sent
    skipped: int = 0  # lines that could not be read (not JSON, no body, no timestamp): not part of the window
    skipped_lines: list = field(default_factory=list)  # up to 20 of them
    filtered: int = 0  # lines the replay filter dropped: not part of the window, never owed
    late_in_log: int = 0  # lines older than one already sent (the log is out of order past the reorder window)
    cut: str | None = None  # why this process stopped reading its window early ("duration"): the reason for the rest
    done: bool = False  # the account was closed by its process (False: the process ended without closing it)

    def miss(self, reason: str, lineno: int | None, n: int = 1) -> None:
        self.not_sent[reason] = self.not_sent.get(reason, 0) + n
        if lineno is not None and len(self.first_not_sent) < 20:
            self.first_not_sent.append(lineno)

    @property
    def lost(self) -> int:
        return sum(self.not_sent.values())

    def to_dict(self) -> dict:
        return asdict(self)


def merge_accounts(accounts: list[ReplayAccount], window: int | None = None, records: int | None = None,
                   window_has_skipped: bool = False) -> dict:
    """One replay account for the run. window: the requests the whole run owed (the driver's pre-scan); what no
    process read is not sent: for the duration where a process stopped at it, else interrupted (a process killed
    before it wrote its account)."""
    out = {"window": 0, "sent": 0, "not_sent": 0, "not_sent_by_reason": {}, "first_not_sent": [], "skipped": 0,
           "skipped_lines": [], "filtered": 0, "late_in_log": 0, "accounts": len(accounts)}
    for a in accounts:
        out["window"] += a.window
        out["sent"] += a.sent
        for k, v in a.not_sent.items():
            out["not_sent_by_reason"][k] = out["not_sent_by_reason"].get(k, 0) + v
        out["first_not_sent"] = sorted(out["first_not_sent"] + a.first_not_sent)[:20]
        out["skipped"] = max(out["skipped"], a.skipped)  # every process reads the whole log: the same lines
        out["skipped_lines"] = sorted(set(out["skipped_lines"] + a.skipped_lines))[:20]
        out["filtered"] = max(out["filtered"], a.filtered)  # every process reads (and filters) the whole log
        out["late_in_log"] += a.late_in_log
    if records is not None and records < out["sent"]:
        out["sent"] = records  # sends whose records never reached the file did not happen as far as anyone knows
    if window is not None:  # window_has_skipped: a count of lines, unreadable ones included
        out["window"] = max(window - (out["skipped"] if window_has_skipped else 0), out["window"])
    gap = out["window"] - out["sent"] - sum(out["not_sent_by_reason"].values())
    if gap > 0:  # requests no process read: past a process's cut (the plan's duration), or lost with a process
        cut = accounts and all(a.done for a in accounts) and any(a.cut == "duration" for a in accounts)
        reason = "duration" if cut else "interrupted"
        out["not_sent_by_reason"][reason] = out["not_sent_by_reason"].get(reason, 0) + gap
    out["not_sent"] = sum(out["not_sent_by_reason"].values())
    return out


def read_accounts(out_dir: str) -> list[ReplayAccount]:
    found = []
    for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
        if name.startswith("replay-") and name.endswith(".json"):
            try:
                with open(os.path.join(out_dir, name)) as f:
                    found.append(ReplayAccount(**json.load(f)))
            except (OSError, ValueError, TypeError):
                continue
    return found
