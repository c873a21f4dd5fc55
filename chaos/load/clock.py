"""One clock for the load user: Unix-second timestamps that never jump.

A record's times are Unix seconds so they line up with the journal and the server's
logs, but every interval (TTFT, inter-token gaps, E2E) must come from a monotonic clock:
a wall-clock step (NTP, a VM resumed) of 17 s once showed up as a 16 s inter-token gap
and ended a run early. So the wall clock is read once, at the anchor, and every later
timestamp is that anchor plus a perf_counter delta. Intervals between two timestamps of
one process are then exactly monotonic; the timestamps themselves drift from the system
clock only by whatever step it took after the anchor (each Locust process anchors when it
starts, so processes differ at most by a step taken between their starts).
"""

from __future__ import annotations

import time


class Clock:
    __slots__ = ("wall0", "mono0")

    def __init__(self):
        self.mono0 = time.perf_counter()
        self.wall0 = time.time()

    def now(self) -> float:
        """Unix seconds, monotonic."""
        return self.wall0 + (time.perf_counter() - self.mono0)

    def at(self, mono: float) -> float:
        """The Unix-second timestamp of a perf_counter() reading."""
        return self.wall0 + (mono - self.mono0)
