"""What a replay does to each line of its log before sending it: scrub it, filter it (chaos.replay), and the
marks it leaves on the entry for chaos.load.workloads.replay_request."""

from __future__ import annotations

from dataclasses import dataclass

from ...replay import ReplayFilter

FILTERED = "filtered out by the replay filter"  # the `why` of a line the filter dropped: counted, never lost
TRACE_FORMATS = ("azure", "burstgpt", "mooncake")  # traces without text: the output length is the trace's
# keys the replay puts on an entry beside the logged body (never sent)
FIXED_KEY, SCRUBBED_KEY = "_chaos_fixed_output", "_chaos_scrubbed"


@dataclass(slots=True)
class ReplayOptions:
    scrub: bool = False
    filter: dict | None = None  # ReplayFilter.of's dict

    def __post_init__(self):
        if not isinstance(self.scrub, bool):
            raise ValueError(f"replay_scrub is true or false, not {self.scrub!r}")
        self.filter = self.compiled().to_dict() if self.filter else None  # checked (and normalised) now

    @classmethod
    def of(cls, extra: dict | None) -> "ReplayOptions":
        """From a WorkloadSpec's extra: {"replay_scrub": bool, "replay_filter": dict}."""
        extra = extra or {}
        return cls(bool(extra.get("replay_scrub", False)), extra.get("replay_filter"))

    @property
    def active(self) -> bool:
        return self.scrub or bool(self.filter)

    def compiled(self) -> ReplayFilter | None:
        return ReplayFilter.of(self.filter)

    def extra(self) -> dict:
        return {"replay_scrub": self.scrub, "replay_filter": self.filter}


def scrub_counts(after: dict, before: dict) -> dict | None:
    """What one item's scrub added to a Scrubber's report (kind -> count), None when nothing was redacted."""
    d = {k: v - before.get(k, 0) for k, v in after.items() if k != "total" and v - before.get(k, 0)}
    return d or None


def merge_counts(total: dict, add: dict | None) -> dict:
    for k, v in (add or {}).items():
        total[k] = total.get(k, 0) + v
    return total
