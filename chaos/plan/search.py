"""The capacity search's decision rule, apart from any load: given what each probed level showed, which level to
probe next, and where the knee lies.

1. Climb: from `start`, multiply by `factor` until a level surely breaks the SLO; never stop at or below
   `expected` (the seed found its bug only past the load it expected), so the climb always reaches a level
   above it.
2. Repeat: a level whose figure is unclear (its interval straddles the limit) between the highest sure pass and
   the lowest sure fail is probed again, up to `max_repeats` times in all; its probes are pooled, so each
   repeat narrows its interval. Before anything broke, an unclear level whose point figures all meet the SLO
   does not stop the climb (a break above bounds the knee first; it is repeated once one is found).
3. Bisect: the widest gap between probed levels inside [highest sure pass, lowest sure fail] is halved
   (geometrically for rates), until the gap is one user (concurrency) or `resolution` relative (rates).
Everything is bounded by `max_probes` (repeats included) and `max_level`.

The knee is the interval [highest sure pass, lowest sure fail]: the safe value is its lower end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .slo import BREAKS, MEETS, UNCLEAR


@dataclass(slots=True)
class SearchConfig:
    start: float = 1.0
    factor: float = 2.0
    max_level: float = 1024.0
    max_probes: int = 12
    max_repeats: int = 3  # probes of one level, at most
    expected: float | None = None
    integer: bool = True  # concurrency: whole users; rates: any positive number
    resolution: float = 0.1  # rates: stop when lowest fail / highest pass - 1 is at most this

    def __post_init__(self):
        if not (self.start > 0 and math.isfinite(self.start)):
            raise ValueError(f"start must be above 0, got {self.start!r}")
        if self.integer and self.start != int(self.start):
            raise ValueError(f"a concurrency starts at a whole number of users, got {self.start!r}")
        if not self.factor > 1:
            raise ValueError(f"factor must be above 1, got {self.factor!r}")
        if self.max_level < self.start:
            raise ValueError(f"max level {self.max_level:g} is below the start {self.start:g}")
        if self.max_probes < 1 or self.max_repeats < 1:
            raise ValueError("max probes and max repeats must be at least 1")
        if self.expected is not None:
            if not self.expected > 0:
                raise ValueError(f"expected load must be above 0, got {self.expected!r}")
            if self.expected >= self.max_level:
                raise ValueError(f"the search must go past the expected load {self.expected:g}: raise the "
                                 f"max level ({self.max_level:g}) above it")
        if not 0 < self.resolution < 1:
            raise ValueError(f"resolution must be in (0, 1), got {self.resolution!r}")


@dataclass(slots=True)
class Level:
    probes: int = 0
    verdict: str = UNCLEAR  # of the pooled probes
    # Where an unclear level's point figures lie: MEETS (every clause's within its limit) lets the climb go on
    # before the level is decided, since only a break above it bounds the knee; BREAKS, a break to confirm first.
    leans: str = BREAKS


@dataclass(slots=True)
class Knee:
    low: float | None  # highest level that surely met the SLO below the first sure break (the safe value)
    high: float | None  # lowest level that surely broke it
    unclear: list = field(default_factory=list)  # levels inside the knee that stayed unclear
    non_monotone: list = field(default_factory=list)  # sure passes above the lowest sure fail (noise, or worse)

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "unclear": self.unclear, "non_monotone": self.non_monotone}


def knee(levels: dict[float, Level]) -> Knee:
    fails = sorted(x for x, s in levels.items() if s.verdict == BREAKS)
    high = fails[0] if fails else None
    passes = sorted(x for x, s in levels.items() if s.verdict == MEETS)
    low = max((x for x in passes if high is None or x < high), default=None)
    inside = sorted(x for x, s in levels.items() if s.verdict == UNCLEAR and (low is None or x > low)
                    and (high is None or x < high))
    return Knee(low, high, inside, [x for x in passes if high is not None and x > high])


def _up(cfg: SearchConfig, x: float) -> float:
    nxt = x * cfg.factor
    nxt = math.ceil(nxt) if cfg.integer else float(f"{nxt:.4g}")
    return min(max(nxt, x + (1 if cfg.integer else 0)), cfg.max_level)


def _between(cfg: SearchConfig, a: float, b: float) -> float | None:
    """A level strictly between a and b at half the gap (geometric for rates with a > 0), or None when the gap
    is already at the resolution."""
    if cfg.integer:
        if b - a <= 1:
            return None
        return float(int(a + (b - a) // 2)) if a > 0 else float(max(1, int(b // 2)))
    if a > 0 and b / a - 1 <= cfg.resolution:
        return None
    mid = math.sqrt(a * b) if a > 0 else b / cfg.factor
    return float(f"{mid:.4g}") if a < float(f"{mid:.4g}") < b else mid


def next_probe(levels: dict[float, Level], cfg: SearchConfig) -> tuple[float, str] | None:
    """(level, why) of the next probe, or None when the search is done (or its probes are spent). A level is an
    int for a concurrency search, a float for rates."""
    found = _next(levels, cfg)
    if found is None:
        return None
    return (int(found[0]) if cfg.integer else float(found[0])), found[1]


def _next(levels: dict[float, Level], cfg: SearchConfig) -> tuple[float, str] | None:
    if sum(s.probes for s in levels.values()) >= cfg.max_probes:
        return None
    k = knee(levels)
    repeat = [x for x in k.unclear if levels[x].probes < cfg.max_repeats]
    if k.high is None:  # nothing broke yet: repeat an unclear top that leans to break, else climb
        top = max(levels) if levels else None
        if top is not None and levels[top].verdict == UNCLEAR and levels[top].leans == BREAKS \
                and levels[top].probes < cfg.max_repeats:
            return top, "repeat: its interval straddles the limit"
        if top is None:
            return cfg.start, "climb: first probe"
        if top >= cfg.max_level:
            return None
        return _up(cfg, top), "climb"
    if cfg.expected is not None and max(levels) <= cfg.expected:
        return _up(cfg, max(levels)), f"climb past the expected load {cfg.expected:g}"
    if repeat:
        return repeat[0], "repeat: its interval straddles the limit"
    # bisect the widest gap between probed levels inside [low, high]
    lo = k.low if k.low is not None else 0.0
    points = sorted({lo, k.high, *[x for x in levels if lo < x < k.high]})
    gaps = sorted(zip(points, points[1:]), key=lambda g: (g[1] / g[0]) if g[0] > 0 else math.inf, reverse=True)
    for a, b in gaps:
        mid = _between(cfg, a, b)
        if mid is not None and mid not in levels:
            return mid, "bisect between the last pass and the first fail"
    return None
