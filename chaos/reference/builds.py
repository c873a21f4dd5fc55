"""What makes a "build" of the reference server behave differently from the bundled one, set at startup (docs/gate.md,
targets/builds/): the changes canary analysis misses, for the gate to catch. Each is a seeded draw, so two runs of
one build draw the same sequence, and each is off (0) by default.

  - stalls: a share of engine steps wait a fixed time before their tokens go out (a GC pause, a lock, a page
    fault storm): the median request never meets one, the tail does;
  - pace spread: each request draws a pace factor, log-normal with median 1; one above 1 streams that much slower
    (each token held (factor - 1) x its own gap). Nothing can make a request faster than the engine, so a factor
    below 1 leaves it as it was: half the requests unchanged, the other half spread wider;
  - rare errors: a share of requests is answered HTTP 500, chosen by a hash of the seed and the prompt, so the
    same prompt fails on every replica. A per-attempt coin would be hidden by the gateway's retries (the other
    replica answers); a build that fails on certain inputs is the rare error a client does see.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

MAX_STALL_MS = 60_000.0
MAX_PACE_SPREAD = 2.0  # log-sd: a factor of e^2 at one sd is already far past any build worth gating


@dataclass(slots=True)
class BuildChanges:
    stall_fraction: float = 0.0  # share of engine steps that stall
    stall_ms: float = 0.0  # how long a stalled step waits before its tokens go out
    pace_spread: float = 0.0  # log-sd of each request's pace factor (median 1)
    error_fraction: float = 0.0  # share of prompts answered HTTP 500
    seed: int = 0

    def __post_init__(self):
        for name in ("stall_fraction", "error_fraction"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], not {v!r}")
        if not 0.0 <= self.stall_ms <= MAX_STALL_MS:
            raise ValueError(f"stall_ms must be in [0, {MAX_STALL_MS:g}], not {self.stall_ms!r}")
        if self.stall_fraction > 0 and self.stall_ms == 0:
            raise ValueError("a stall fraction needs a stall time (--stall-ms) above 0")
        if not 0.0 <= self.pace_spread <= MAX_PACE_SPREAD:
            raise ValueError(f"pace_spread must be in [0, {MAX_PACE_SPREAD:g}], not {self.pace_spread!r}")

    @property
    def changed(self) -> bool:
        return self.stall_fraction > 0 or self.pace_spread > 0 or self.error_fraction > 0

    def stall_draw(self) -> "StallDraw":
        return StallDraw(self.stall_fraction, self.stall_ms / 1000, random.Random(f"stall/{self.seed}"))

    def pace_draw(self) -> "PaceDraw":
        return PaceDraw(self.pace_spread, random.Random(f"pace/{self.seed}"))

    def fails(self, prompt_ids: list[int]) -> bool:
        """Whether this build answers this prompt with HTTP 500: a uniform number from a hash of the seed and the
        prompt, below error_fraction. The same prompt fails on every replica and in every run."""
        if self.error_fraction <= 0:
            return False
        h = hashlib.blake2b(digest_size=8, key=self.seed.to_bytes(8, "little", signed=True))
        h.update(",".join(map(str, prompt_ids)).encode())
        return int.from_bytes(h.digest(), "little") / 2 ** 64 < self.error_fraction


@dataclass(slots=True)
class StallDraw:
    """One engine's stalls: drawn on its engine thread only, one draw per step, so the sequence is the seed's."""
    fraction: float
    seconds: float
    rng: random.Random

    def next(self) -> float:
        """Seconds this step stalls (0 for most)."""
        return self.seconds if self.fraction > 0 and self.rng.random() < self.fraction else 0.0


@dataclass(slots=True)
class PaceDraw:
    """Each request's pace factor, drawn on the event loop as requests arrive."""
    spread: float
    rng: random.Random

    def next(self) -> float:
        return max(1.0, math.exp(self.rng.gauss(0.0, self.spread))) if self.spread > 0 else 1.0
