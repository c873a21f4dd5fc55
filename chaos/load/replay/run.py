"""The replay side of a load run (chaos.load.driver.LoadRun): what a timed replay owes, its account once Locust
has ended, and the replay's scrub report, filtered lines and failed source lines (chaos.load.replay.notes)."""

from __future__ import annotations

import os

from ..accounts import merge_accounts, read_accounts
from ..errors import LoadError
from .notes import replay_order


class ReplayRun:
    """Mixed into LoadRun: uses its cfg, notes, replay_window, replay, replay_options, replay_filtered and
    replay_facts."""

    def _plan_replay(self, wl) -> None:
        """What a timed replay owes: the first max_requests requests of the log (passes repeat), else all of it."""
        files = list(wl.replay_scans)
        if len(files) != 1 or len(self.cfg.workload) != 1:
            raise LoadError("a timed replay (replay_speed) sends one log file and nothing else: drop the other "
                            "workloads, or replay without replay_speed")
        scan = wl.replay_scans[files[0]]
        if not scan.timed:
            raise LoadError(f"{files[0]}: replay_speed needs a numeric 'timestamp' on every line (the first "
                            f"{scan.checked} were checked)")
        mr = self.cfg.plan.max_requests
        self.replay_window = (mr, False) if mr else (scan.requests, True)
        for name in os.listdir(self.cfg.out_dir):  # a previous run's accounts in the same folder must not count
            if name.startswith("replay-") and name.endswith(".json"):
                os.remove(os.path.join(self.cfg.out_dir, name))

    def _replay_input(self, wl) -> None:
        from .opts import ReplayOptions

        spec = next((s for s, _ in self.cfg.workload if s.name == "replay"), None)
        if spec is not None:
            self.replay_options = ReplayOptions.of(spec.extra)
            self.replay_filtered = sum(scan.filtered for scan in wl.replay_scans.values())

    def input_facts(self, records: list) -> dict | None:
        """The replay's scrub report, filter count and failed source lines (notes.py), added to the notes once."""
        from .notes import replay_facts, replay_notes

        if self.replay_facts is None and self.replay_options is not None:
            filtered = self.replay["filtered"] if self.replay is not None else self.replay_filtered
            self.replay_facts = replay_facts(records, self.replay_options, filtered)
            self.notes.extend(replay_notes(self.replay_facts))
        return self.replay_facts

    def account_replay(self, records: list | None = None) -> dict | None:
        """The replay's account once Locust has ended (None for other plans): sent, not sent by reason, and with
        records the lag and order figures. Adds a note when anything was not sent: a run's report shows it."""
        if self.replay_window is None:
            return None
        first = self.replay is None
        window, as_lines = self.replay_window
        acc = merge_accounts(read_accounts(self.cfg.out_dir), window,
                             None if records is None else sum(1 for r in records if r.source_line is not None),
                             window_has_skipped=as_lines)
        if records is not None:
            acc["out_of_order"] = replay_order(records)
        self.replay = acc
        if first and acc["not_sent"]:
            why = ", ".join(f"{k} {v}" for k, v in sorted(acc["not_sent_by_reason"].items()))
            self.notes.append(f"REPLAY LOST REQUESTS: {acc['not_sent']} of {acc['window']} requests of the log "
                              f"window were not sent ({why}); first lines not sent: "
                              f"{', '.join(map(str, acc['first_not_sent'][:10])) or '-'}")
        if first and acc["skipped"]:
            self.notes.append(f"replay skipped {acc['skipped']} unreadable lines of the log (lines "
                              f"{', '.join(map(str, acc['skipped_lines'][:10]))})")
        return acc
