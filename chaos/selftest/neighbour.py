"""A scripted neighbour: processes that take CPU on a seeded schedule, switched on and off at random moments, as a
shared CI runner's other jobs do. `chaos selftest neighbour` runs one beside whatever the user wants to try (a
gate, an A/A control); bench/gate_calibration.py and the gate's tests use it to show the gate holds on a busy host.

Each of ceil(cores) burner processes spins for `duty` of every 10 ms slice and sleeps the rest, so 1.5 cores is
two burners at 75 %. The schedule alternates off and on periods, each drawn uniformly from its range with the
seed; the burners are held with SIGSTOP while off and let go with SIGCONT while on. Bounded: after `total`
seconds everything stops by itself, and the burners die with the controller (a parent-death signal).
"""

from __future__ import annotations

import ctypes
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ..errors import InputError, counts_as, handled

SLICE_S = 0.01
PR_SET_PDEATHSIG = 1


@dataclass(slots=True)
class Schedule:
    """Alternating periods from t = 0: (start, end, on) each, covering [0, total)."""
    total: float
    periods: list[tuple[float, float, bool]] = field(default_factory=list)

    @classmethod
    def draw(cls, seed: int, total: float, on: tuple[float, float], off: tuple[float, float],
             start_on: bool | None = None) -> Schedule:
        for lo, hi in (on, off):
            if not 0 < lo <= hi:
                raise ValueError(f"a period range is two durations 0 < low <= high; got {lo:g}-{hi:g}")
        if not total > 0:
            raise ValueError("the neighbour's total time must be > 0")
        rng = random.Random(seed)
        state = rng.random() < 0.5 if start_on is None else start_on
        t, periods = 0.0, []
        while t < total:
            lo, hi = on if state else off
            end = min(total, t + rng.uniform(lo, hi))
            periods.append((round(t, 3), round(end, 3), state))
            t, state = end, not state
        return cls(total, periods)

    def is_on(self, t: float) -> bool:
        return any(a <= t < b and s for a, b, s in self.periods)

    def on_share(self) -> float:
        return sum(b - a for a, b, s in self.periods if s) / self.total

    def describe(self) -> str:
        return ", ".join(f"{'on' if s else 'off'} {a:.0f}-{b:.0f}s" for a, b, s in self.periods)


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the controller's finally still stops them


def burn(duty: float, total: float) -> None:
    """Spin for duty of every slice, sleep the rest, for at most total seconds."""
    end = time.monotonic() + total
    busy, idle = duty * SLICE_S, (1 - duty) * SLICE_S
    while time.monotonic() < end:
        t = time.monotonic() + busy
        while time.monotonic() < t:
            pass
        if idle > 0:
            time.sleep(idle)


class Neighbour:
    """The burners and the controller's loop; run() blocks until the schedule ends (or stop())."""

    def __init__(self, cores: float, schedule: Schedule, log=lambda line: None):
        if not 0 < cores <= 64:
            raise ValueError("--cores is how many cores' worth to take: more than 0, at most 64")
        self.cores, self.schedule, self.log = cores, schedule, log
        self.procs: list[subprocess.Popen] = []
        self.stopped = False

    def _spawn(self) -> None:
        n = math.ceil(self.cores)
        duty = self.cores / n
        for _ in range(n):
            p = subprocess.Popen([sys.executable, "-c", f"from chaos.selftest.neighbour import burn; "
                                  f"burn({duty!r}, {self.schedule.total + 5!r})"],
                                 preexec_fn=_die_with_parent)
            os.kill(p.pid, signal.SIGSTOP)  # held until the schedule says on
            self.procs.append(p)

    def _signal(self, sig) -> None:
        for p in self.procs:
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass

    def run(self) -> None:
        self._spawn()
        t0, state = time.monotonic(), None
        try:
            while not self.stopped:
                t = time.monotonic() - t0
                if t >= self.schedule.total:
                    break
                on = self.schedule.is_on(t)
                if on != state:
                    self._signal(signal.SIGCONT if on else signal.SIGSTOP)
                    self.log(f"{time.time():.3f} {'on' if on else 'off'} at {t:.1f}s")
                    state = on
                time.sleep(0.05)
        finally:
            self.close()

    def stop(self, *_):
        self.stopped = True

    def close(self) -> None:
        for p in self.procs:
            p.kill()  # a stopped process dies of SIGKILL too
            p.wait()
        self.procs = []


@handled
def cmd_neighbour(a) -> int:
    from ..common import parse_duration

    with counts_as(InputError, ValueError):
        total = parse_duration(a.total)
        on = tuple(parse_duration(x) for x in a.on.split("-", 1))
        off = tuple(parse_duration(x) for x in a.off.split("-", 1))
        if len(on) != 2 or len(off) != 2:
            raise ValueError("--on and --off are ranges: LOW-HIGH, e.g. 20s-90s")
        sched = Schedule.draw(a.seed, total, on, off, start_on={"on": True, "off": False}.get(a.start))
        nb = Neighbour(a.cores, sched, log=lambda line: print(line, flush=True))
    print(f"neighbour: {a.cores:g} cores, seed {a.seed}, on {sched.on_share():.0%} of {total:.0f}s: "
          f"{sched.describe()}", flush=True)
    signal.signal(signal.SIGTERM, nb.stop)
    signal.signal(signal.SIGINT, nb.stop)
    nb.run()
    return 0


def register(ssub, formatter) -> None:
    n = ssub.add_parser(
        "neighbour", formatter_class=formatter,
        help="take CPU on a seeded on/off schedule: a busy neighbour to try a gate beside",
        description="Take CPU as a shared runner's other jobs do: --cores cores' worth, switched on and off at\n"
                    "moments drawn from --seed (each on period from --on, each off period from --off), for\n"
                    "--for, then stop. Run it beside `chaos gate --aa` to see whether this runner's gate holds\n"
                    "when a neighbour comes and goes (docs/gate.md).",
        epilog="examples:\n"
               "  chaos selftest neighbour --cores 1 --for 10m &     # one core, on and off every 20-90 s\n"
               "  chaos gate --aa --baseline-target targets/reference.yaml gates/upgrade.yaml\n"
               "  chaos selftest neighbour --cores 0.5 --on 5s-15s --off 5s-15s --seed 3 --for 2m")
    n.add_argument("--cores", type=float, default=1.0, help="cores' worth of CPU to take while on")
    n.add_argument("--seed", type=int, default=0)
    n.add_argument("--for", dest="total", default="10m", help="how long, then stop (e.g. 600s, 10m)")
    n.add_argument("--on", default="20s-90s", help="range of each on period")
    n.add_argument("--off", default="20s-90s", help="range of each off period")
    n.add_argument("--start", choices=("on", "off", "random"), default="random", help="the first period's state")
    n.set_defaults(func=cmd_neighbour)
