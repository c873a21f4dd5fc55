"""One clock for the load: Unix-second timestamps that never jump, shared by every process of a run.

A record's times are Unix seconds so they line up with the journal and the server's
logs, but every interval (TTFT, inter-token gaps, E2E) must come from a monotonic clock:
a wall-clock step (NTP, a VM resumed) of 17 s once showed up as a 16 s inter-token gap
and ended a run early. So the wall clock is read once, at the anchor, and every later
timestamp is that anchor plus a monotonic delta.

The anchor is read once per run, by the driver, and handed to the Locust processes in
the environment (CHAOS_CLOCK_ANCHOR): CLOCK_MONOTONIC is one clock for every process of
the machine, so the driver, the runner's schedule and every record share one timeline
exactly, even when the wall clock steps between the driver's start and Locust's.
"""

from __future__ import annotations

import os
import time

ENV = "CHAOS_CLOCK_ANCHOR"
WORKER_ENV = "CHAOS_WORKER"  # a Locust worker's name (w0, w1...) as the run placed it: its records say it


class Clock:
    __slots__ = ("wall0", "mono0")

    def __init__(self, wall0: float | None = None, mono0: float | None = None):
        if wall0 is None or mono0 is None:
            mono0, wall0 = time.perf_counter(), time.time()  # perf_counter is CLOCK_MONOTONIC on Linux
        self.wall0, self.mono0 = wall0, mono0

    @classmethod
    def from_env(cls, environ=os.environ) -> "Clock":
        """The run's clock when a driver handed one down, else a fresh anchor (a Locust file run by hand)."""
        try:
            wall0, mono0 = (float(x) for x in environ[ENV].split())
        except (KeyError, ValueError):
            return cls()
        return cls(wall0, mono0)

    def to_env(self) -> str:
        return f"{self.wall0!r} {self.mono0!r}"

    def now(self) -> float:
        """Unix seconds, monotonic."""
        return self.wall0 + (time.perf_counter() - self.mono0)

    def at(self, mono: float) -> float:
        """The Unix-second timestamp of a perf_counter() reading."""
        return self.wall0 + (mono - self.mono0)
