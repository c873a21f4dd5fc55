"""A capacity probe held until its level is decided: one load at one level, its SLO judged every `hold` seconds
on everything it has sent, ended as soon as the SLO surely holds or surely breaks, and at `looks` holds at most.

Looking again and again at a growing sample and stopping at the first interval that clears the limit would call
noise a verdict more often than the intervals' 95 % says. Each look's intervals are therefore at 1 - alpha/looks
(Bonferroni over the looks): the chance that any look of a probe decides wrongly stays within alpha, whatever
the looks saw. The same design as the gate's sequential pairs (chaos/gate/sequential.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..load.driver import LoadRun
from .figures import judge
from .loadrun import Send, load_config
from .slo import SLO, UNCLEAR

MAX_LOOKS = 12


@dataclass(slots=True, frozen=True)
class Holding:
    """hold: seconds between looks; looks: at most this many; alpha: the probe's error, spent over its looks."""

    hold: float
    looks: int = 4
    alpha: float = 0.05

    def __post_init__(self):
        if not self.hold >= 1:
            raise ValueError(f"--hold {self.hold:g}s: at least 1 s between looks")
        if not 1 <= self.looks <= MAX_LOOKS:
            raise ValueError(f"--looks {self.looks}: from 1 to {MAX_LOOKS}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha {self.alpha}: in (0, 0.5)")

    @property
    def confidence(self) -> float:
        """Each look's intervals: 1 - alpha / looks."""
        return 1 - self.alpha / self.looks


@dataclass(slots=True)
class Held:
    result: object  # the driver's LoadResult
    looks: int  # looks taken
    seconds: float  # how long the level was held
    verdict: str  # the last look's


def hold_level(r, send: Send, level: float, h: Holding, out: str, slo: SLO, open_loop: bool = False,
               progress=print) -> Held:
    """One probe: the level held for at most h.looks x h.hold seconds, ended at the first look that decides."""
    run = LoadRun(load_config(r, send, [level], h.hold * h.looks, out, open_loop), progress)
    pooled, looks, verdict = [], 0, UNCLEAR

    def look(when: str) -> str:
        nonlocal looks
        looks += 1
        pooled.extend(run.new_records())
        v = judge(pooled, slo, open_loop, h.confidence)["verdict"]
        progress(f"  look {looks}/{h.looks} {when}: {len(pooled)} requests -> {v}")
        return v

    with run.running():
        t0 = time.monotonic()
        while run.poll():
            time.sleep(0.2)
            if time.monotonic() - t0 < (looks + 1) * h.hold:
                continue
            verdict = look(f"at {(looks + 1) * h.hold:g}s")
            if verdict != UNCLEAR:
                run.end_early(f"{verdict} at look {looks} of {h.looks}", grace=send.stop_timeout)
                break
        else:  # the load ran its course (Locust's clock starts after ours): its last requests are one more look
            if looks < h.looks:
                verdict = look("at the end")
    seconds = time.monotonic() - t0 if looks else 0.0
    return Held(run.result(), max(looks, 1), min(seconds, h.hold * h.looks), verdict)
