"""Load plans: fixed users, steps, ramp, and open-loop arrival rates. Always bounded in time.

A plan is a list of stages. Closed-loop stages set a user count; open-loop stages set an
arrival rate (requests/s, constant or Poisson) served by a pool of users, with each
request timed from its intended send time.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from ..common import parse_duration

@dataclass(slots=True)
class Stage:
    name: str
    duration: float
    users: int  # closed loop: the user count; open loop: the size of the sending pool
    spawn_rate: float
    rate: float | None = None  # open loop: arrivals per second
    poisson: bool = False
    ramp_to: int | None = None  # closed loop: grow users linearly to this by the stage's end

    def __post_init__(self):
        if self.duration <= 0:
            raise ValueError(f"stage {self.name}: duration must be > 0")
        if self.users < 1:
            raise ValueError(f"stage {self.name}: users must be >= 1")
        if self.spawn_rate <= 0:
            raise ValueError(f"stage {self.name}: spawn_rate must be > 0")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"stage {self.name}: rate must be > 0")


@dataclass(slots=True)
class LoadPlan:
    stages: list[Stage]
    max_requests: int | None = None
    stop_timeout: float = 10.0  # how long in-flight requests may finish after the last stage
    kind: str = "users"  # users | steps | ramp | rate | replay
    replay_speed: float | None = None  # replay at the log's own timing, this many times faster

    def __post_init__(self):
        if not self.stages:
            raise ValueError("a load plan needs at least one stage")
        if self.replay_speed is not None and self.replay_speed <= 0:
            raise ValueError("replay speed must be > 0")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError("max_requests must be >= 1")

    @property
    def duration(self) -> float:
        return sum(s.duration for s in self.stages)

    @property
    def open_loop(self) -> bool:
        return self.stages[0].rate is not None or self.replay_speed is not None

    def stage_at(self, t: float) -> tuple[int, Stage] | None:
        """The stage in force t seconds after the start; None once the plan is over."""
        for i, s in enumerate(self.stages):
            if t < s.duration:
                return i, s
            t -= s.duration
        return None

    def users_at(self, t: float) -> tuple[int, float, str] | None:
        found = self.stage_at(t)
        if found is None:
            return None
        i, s = found
        users = s.users
        if s.ramp_to is not None:
            start = sum(x.duration for x in self.stages[:i])
            users = round(s.users + (s.ramp_to - s.users) * min(1.0, (t - start) / s.duration))
        return max(1, users), s.spawn_rate, s.name

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LoadPlan":
        return cls(stages=[Stage(**s) for s in d["stages"]], max_requests=d.get("max_requests"),
                   stop_timeout=d.get("stop_timeout", 10.0), kind=d.get("kind", "users"),
                   replay_speed=d.get("replay_speed"))


def fixed(users: int, duration: float, spawn_rate: float | None = None, **kw) -> LoadPlan:
    return LoadPlan([Stage(f"users={users}", duration, users, spawn_rate or min(100.0, max(1.0, users)))],
                    kind="users", **kw)


def steps(user_steps: list[int], step_duration: float, spawn_rate: float | None = None, **kw) -> LoadPlan:
    """The seed's gradient, e.g. 10, 50, 100, 200, 500, each held for step_duration."""
    return LoadPlan([Stage(f"users={u}", step_duration, u, spawn_rate or min(100.0, max(1.0, u)))
                     for u in user_steps],
                    kind="steps", **kw)


def ramp(start: int, end: int, duration: float, **kw) -> LoadPlan:
    rate = max(1.0, abs(end - start) / duration * 2)
    return LoadPlan([Stage(f"ramp {start}->{end}", duration, start, rate, ramp_to=end)], kind="ramp", **kw)


def arrival_rate(rates: list[float], stage_duration: float, poisson: bool = False, max_users: int = 256,
                 **kw) -> LoadPlan:
    return LoadPlan([Stage(f"rate={r:g}/s", stage_duration, max_users, float(max_users), rate=r, poisson=poisson)
                     for r in rates], kind="rate", **kw)


def replay(duration: float, speed: float = 1.0, max_users: int = 256, **kw) -> LoadPlan:
    """Send each logged request at its original offset divided by speed (open loop)."""
    return LoadPlan([Stage(f"replay x{speed:g}", duration, max_users, float(max_users))], kind="replay",
                    replay_speed=speed, **kw)


SHAPES = ("users", "steps", "ramp", "rate", "replay_speed")


def plan_from(spec: dict) -> LoadPlan:
    """The plan a load description asks for, keyed as an experiment's load: section (`chaos load` maps its
    options onto the same keys). Exactly one shape: users, steps (a list, each held step_duration), ramp
    ("START:END" over duration), rate (arrivals/s, or a list held step_duration each) or replay_speed;
    users 10 when none is given. Durations are strings ("30s", "2m") or seconds."""
    chosen = [k for k in SHAPES if spec.get(k) is not None]
    if len(chosen) > 1:
        raise ValueError(f"choose one load shape, not {' and '.join(chosen)}")
    kw = dict(max_requests=spec.get("max_requests"), stop_timeout=parse_duration(spec.get("stop_timeout", "10s")))
    duration = parse_duration(spec.get("duration", "60s"))
    step_duration = parse_duration(spec.get("step_duration", "30s"))
    spawn_rate, max_users = spec.get("spawn_rate"), spec.get("max_users", 256)
    shape = chosen[0] if chosen else "users"
    if shape == "steps":
        return steps(list(spec["steps"]), step_duration, spawn_rate, **kw)
    if shape == "ramp":
        lo, sep, hi = str(spec["ramp"]).partition(":")
        if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
            raise ValueError(f"ramp {spec['ramp']!r}: give START:END users, e.g. 1:64")
        return ramp(int(lo), int(hi), duration, **kw)
    if shape == "rate":
        rates = spec["rate"] if isinstance(spec["rate"], list) else [spec["rate"]]
        return arrival_rate([float(r) for r in rates], step_duration if len(rates) > 1 else duration,
                            spec.get("poisson", False), max_users, **kw)
    if shape == "replay_speed":
        return replay(duration, spec["replay_speed"], max_users, **kw)
    return fixed(spec.get("users") or 10, duration, spawn_rate, **kw)


class ArrivalSchedule:
    """Intended send times for one process's share of an open-loop plan.

    With n processes each takes rate/n: a Poisson process thinned n ways is still
    Poisson, and constant arrivals are phase-shifted so the union stays even.
    """

    def __init__(self, plan: LoadPlan, start: float, share: int = 1, index: int = 0, seed: int = 0):
        self.plan, self.start, self.share = plan, start, share
        self.rng = random.Random(seed * 7919 + index)
        self._stage_start = start
        self._stage = 0
        first = plan.stages[0]
        gap = share / first.rate
        self._next = start + (self.rng.expovariate(1 / gap) if first.poisson else gap * index / share)

    def next(self) -> float | None:
        """The next intended send time (epoch seconds), or None when the plan is over."""
        while self._stage < len(self.plan.stages):
            stage = self.plan.stages[self._stage]
            end = self._stage_start + stage.duration
            if self._next < end:
                t = self._next
                gap = self.share / stage.rate
                self._next += self.rng.expovariate(1 / gap) if stage.poisson else gap
                return t
            self._stage += 1
            self._stage_start = end
            if self._stage < len(self.plan.stages):
                nxt = self.plan.stages[self._stage]
                self._next = max(self._next, end)
                if not nxt.poisson:
                    self._next = end + (self._next - end) % (self.share / nxt.rate)
        return None


def expected_requests(plan: LoadPlan) -> float:
    return sum(s.rate * s.duration for s in plan.stages if s.rate) if plan.open_loop else math.nan
