"""Where each key figure of the game-day history changed: E-divisive means with a t-test (edivisive.py) over the
figure's whole series, with a game day's tolerance and host guard. docs/gameday.md says why this method.

A time is judged on a log scale (positive, and its spread grows with it), a share as it is. A change must pass the
t-test at max_p AND exceed the tolerance (10 % and a floor: 5 ms of latency, 0.5 s of a recovery time; a share,
one point): within the merge, so that a change too small to matter does not keep its neighbours' sides short. A
time is not called changed where the game days either side ran on different hosts (the median of others' CPU
apart by more than the bound): a neighbour explains a time, not a build.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..host import DEFAULT_BOUND, HostSummary, differs
from ..report.sections import duration_text
from .edivisive import Detector, Split, change_points, relative_change
from .history import Point, median_host


@dataclass(slots=True)
class Rule:
    """When a step in a figure's history is called a change. bench/changepoints.py calibrates the defaults."""
    window: int = 30  # game days a split sees at once
    # 1e-4, not Otava's 1e-3: a game day judges ~16 figures; at 1e-3 each had ~0.5 false change points in 100
    # game days of unchanged code (~8 a game day's figures), at 1e-4 ~0.05 (BENCHMARKS.md section 18)
    max_p: float = 0.0001
    min_history: int = 5  # game days a figure needs before anything is called
    tolerance: float = 0.10  # relative, for times
    latency_floor: float = 0.005  # seconds
    recovery_floor: float = 0.5  # seconds
    fraction_tolerance: float = 0.01  # absolute, for shares (the error budget)
    host_bound: float = DEFAULT_BOUND

    def __post_init__(self) -> None:
        Detector(self.window, self.max_p)  # its own checks
        if self.min_history < 3:
            raise ValueError(f"min_history {self.min_history}: at least 3 game days")
        for name in ("tolerance", "latency_floor", "recovery_floor", "fraction_tolerance", "host_bound"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} {getattr(self, name)}: not negative")

    @property
    def detector(self) -> Detector:
        return Detector(self.window, self.max_p)

    def floor(self, figure: str) -> float:
        return self.recovery_floor if figure.startswith("time to") else self.latency_floor


def value_text(v: float, unit: str) -> str:
    return f"{v * 100:.2f}%" if unit == "fraction" else duration_text(v)


@dataclass(slots=True)
class Change:
    experiment: str
    figure: str
    unit: str
    at: Point  # the first game day of the new level
    before: float  # the level either side, in the figure's unit (a time's: the geometric mean)
    after: float
    p: float
    n_before: int  # game days on each side, up to the neighbouring change points
    n_after: int
    new: bool = False  # first found with the latest game day
    held: str | None = None  # why it is not called: the hosts either side differed

    @property
    def direction(self) -> str:
        return "up" if self.after > self.before else "down"

    def text(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.at.started))
        day = self.at.day or f"#{self.at.gameday_id}"
        if self.unit == "fraction":
            size = f"{(self.after - self.before) * 100:+.2f} points"
        else:
            size = f"x{self.after / self.before:.2f}" if self.before else "from 0"
        return (f"{self.direction} at game day {day} ({when}): {value_text(self.before, self.unit)} -> "
                f"{value_text(self.after, self.unit)} ({size}), p {self.p:.2g}; {self.n_before} game days before, "
                f"{self.n_after} after")


def _over(value: float, tolerance: float) -> float:
    return math.inf if tolerance == 0 else value / tolerance


def _size(rule: Rule, figure: str, unit: str, log: bool):
    """How many tolerances a change is: above 1 is big enough (the smaller of the relative and the absolute)."""
    if unit == "fraction":
        return lambda s: _over(abs(s.mean_after - s.mean_before), rule.fraction_tolerance)
    floor = rule.floor(figure)
    if log:
        return lambda s: min(_over(math.expm1(abs(s.mean_after - s.mean_before)), rule.tolerance),
                             _over(abs(math.exp(s.mean_after) - math.exp(s.mean_before)), floor))
    return lambda s: min(_over(relative_change(s), rule.tolerance), _over(abs(s.mean_after - s.mean_before), floor))


def figure_changes(points: list[Point], rule: Rule | None = None, hosts: dict | None = None) -> list[Change]:
    """One figure's change points over its history, oldest first (none under min_history values). hosts:
    (game day id, experiment) -> HostSummary, for the host guard of a time."""
    rule, hosts = rule or Rule(), hosts or {}
    pts = [p for p in points if p.value is not None]
    if len(pts) < rule.min_history:
        return []
    unit, figure = pts[-1].unit, pts[-1].figure
    log = unit == "s" and min(p.value for p in pts) > 0
    x = np.log([p.value for p in pts]) if log else np.asarray([p.value for p in pts], float)
    back = math.exp if log else float
    out = []
    for s in change_points(x, rule.detector, _size(rule, figure, unit, log), 1.0):
        out.append(Change(pts[0].experiment, figure, unit, pts[s.index], back(s.mean_before), back(s.mean_after),
                          s.p, s.n_before, s.n_after, held=_held(pts, s, hosts, rule) if unit == "s" else None))
    return out


def _held(pts: list[Point], s: Split, hosts: dict, rule: Rule) -> str | None:
    def side(lo: int, hi: int) -> HostSummary | None:
        return median_host([hosts.get((p.gameday_id, p.experiment)) for p in pts[lo:hi]])

    return differs(side(s.index - s.n_before, s.index), side(s.index, s.index + s.n_after), rule.host_bound)


def all_changes(series: dict, gameday_id: int | None = None, hosts: dict | None = None,
                rule: Rule | None = None) -> list[Change]:
    """Every figure's change points, by experiment and figure, oldest first; those the latest game day
    (gameday_id) brought to light marked new: not found in the history without it."""
    rule = rule or Rule()
    out = []
    for _, pts in sorted(series.items()):
        found = figure_changes(pts, rule, hosts)
        if found and gameday_id is not None and pts[-1].gameday_id == gameday_id:
            known = {c.at.gameday_id for c in figure_changes(pts[:-1], rule, hosts)}
            for c in found:
                c.new = c.at.gameday_id not in known
        out += found
    return out


def too_short(series: dict, gameday_id: int | None, rule: Rule | None = None) -> str | None:
    """'3 figure(s) have fewer than 5 game days ...', or None: this game day's figures not judged yet."""
    rule = rule or Rule()
    counts = [sum(p.value is not None for p in pts) for pts in series.values()
              if pts and pts[-1].gameday_id == gameday_id]
    short = [n for n in counts if n < rule.min_history]
    if not short:
        return None
    return (f"{len(short)} figure(s) have fewer than {rule.min_history} game days (the fewest: {min(short)}): "
            f"no change is called in them until there are {rule.min_history}")
