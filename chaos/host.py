"""The host a run shares, measured while it runs: how much CPU everything outside the run took, and how loaded the
machine was. A busy neighbour slows a run as a slower build would; only a measure of the neighbour tells the two
apart (docs/gate.md, "The host").

Every `interval` seconds a daemon thread appends one line to RUN_DIR/host.jsonl (flushed: a killed run keeps
what it had):

    {"t": epoch, "dt": 1.0, "ncpu": 2, "others": 0.98, "own": 1.21, "steal": 0.0, "load1": 2.9,
     "psi_cpu": 0.31, "psi_io": 0.0, "psi_mem": 0.0}

    others   cores' worth of CPU used by processes outside the run, steal included (machine busy time from
             /proc/stat, less the run's own, plus steal): what a neighbour takes
    own      cores' worth used by the run: its process and every descendant (replicas, gateway, proxies, Locust),
             the reaped ones included (their time lands in their parent's children times)
    steal    cores' worth the hypervisor gave to other guests
    load1    the 1-minute load average
    psi_*    the share of the interval in which some task waited for CPU / I/O / memory (/proc/pressure; None
             where the kernel has no PSI)

Only `others` is build-independent: the run's own CPU, the load average and CPU pressure all count the run's
processes too, so a build that works harder raises them. That is why the gate's guard reads `others` alone and
the rest are shown beside it. Standard library and psutil only: the runner samples, the reports, the gate and
game days read (a low module, imported by each of them).
"""

from __future__ import annotations

import json
import math
import os
import resource
import threading
import time
from dataclasses import dataclass

import psutil

from .rundir.journal import Event

HOST_FILE = "host.jsonl"
FIELDS = ("others", "own", "steal", "load1", "psi_cpu", "psi_io", "psi_mem")
# Cores' worth of CPU by others that the gate's guard tolerates between two runs it compares, by default. On this
# 2-core box a neighbour taking 0.25 of a core more in one run than in the other moves a latency P50 by about the
# gate's 10 % tolerance (BENCHMARKS.md §17); a quiet box's own background stays within 0.05.
DEFAULT_BOUND = 0.25
MAX_DURATION_S = 6 * 3600.0  # the sampler stops by itself after this (a suite stops a run at 6 h)
EXTRA_EVERY_S = 5.0


# -- reading the kernel --------------------------------------------------------------------------------------------

def _cpu_jiffies(path: str = "/proc/stat") -> tuple[float, float, float] | None:
    """(busy, steal, all) seconds of the whole machine since boot, or None where there is no /proc/stat."""
    try:
        with open(path) as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    v = [int(x) for x in first[1:]] + [0] * 10
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    hz = os.sysconf("SC_CLK_TCK")
    busy = user + nice + system + irq + softirq  # guest time is inside user already
    return busy / hz, steal / hz, (busy + idle + iowait + steal) / hz


def _psi_total(kind: str, root: str = "/proc/pressure") -> float | None:
    """Microseconds of `some` stall since boot for cpu, io or memory; None without PSI."""
    try:
        with open(os.path.join(root, kind)) as f:
            for line in f:
                if line.startswith("some"):
                    return float(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None
    return None


def _cpu_of(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def own_cpu(root: int, extra=()) -> float:
    """CPU seconds of root and all its descendants, living or reaped (a reaped process's time is in its reaper's
    children times), plus the `extra` pids' (processes of the run that are not its descendants: a container's).
    A process that ends between two samples is counted once: in its own times while it lives, then in its
    reaper's."""
    total = 0.0
    seen = set()
    try:
        top = psutil.Process(root)
        procs = [top] + top.children(recursive=True)
    except psutil.Error:
        procs = []
    for pid in extra:
        try:
            p = psutil.Process(pid)
            procs += [p] + p.children(recursive=True)
        except psutil.Error:
            continue
    for p in procs:
        if p.pid in seen:
            continue
        seen.add(p.pid)
        try:
            total += _cpu_of(p)
        except psutil.Error:  # gone between listing and reading: its reaper's times carry it from now on
            continue
    if root == os.getpid():  # our own children times, precise to the microsecond
        r, s = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        total += (r.ru_utime + r.ru_stime + s.ru_utime + s.ru_stime) - _cpu_of(psutil.Process(root))
    return total


# -- sampling ------------------------------------------------------------------------------------------------------

class HostSampler:
    """Samples the host every `interval` seconds into RUN_DIR/host.jsonl until stop(). `clock()` stamps each line
    on the run's timeline; `extra_pids()` names the run's processes that are not its descendants."""

    def __init__(self, path: str, clock=time.time, root: int | None = None, interval: float = 1.0,
                 extra_pids=None, max_duration: float = MAX_DURATION_S):
        if not interval > 0:
            raise ValueError("the host sampling interval must be > 0 seconds")
        self.path, self.clock, self.root, self.interval = path, clock, root or os.getpid(), interval
        self.extra_pids, self._extra, self._extra_at = extra_pids, (), -math.inf
        self.max_duration = max_duration
        self.ncpu = psutil.cpu_count() or 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = None
        self.samples = 0

    def _extra_pids(self) -> tuple:
        """The run's processes outside its tree (a container's), looked up every EXTRA_EVERY_S: the lookup
        reads every process's environment."""
        if self.extra_pids is None or time.monotonic() - self._extra_at < EXTRA_EVERY_S:
            return self._extra
        try:
            self._extra = tuple(self.extra_pids())
        except Exception:  # noqa: BLE001 - a target that cannot say loses only the precision, never the run
            self._extra = ()
        self._extra_at = time.monotonic()
        return self._extra

    def _read(self) -> dict:
        cpu = _cpu_jiffies()
        return {"m": time.monotonic(), "cpu": cpu, "own": own_cpu(self.root, self._extra_pids()),
                "psi": {k: _psi_total(k) for k in ("cpu", "io", "memory")}}

    def sample(self) -> dict | None:
        """One line: the interval since the last call (None on the first)."""
        now = self._read()
        last, self._last = self._last, now
        if last is None:
            return None
        dt = now["m"] - last["m"]
        if dt <= 0:
            return None
        own = max(0.0, (now["own"] - last["own"]) / dt)
        line = {"t": round(self.clock(), 3), "dt": round(dt, 3), "ncpu": self.ncpu, "own": round(own, 3),
                "others": None, "steal": None}
        if now["cpu"] and last["cpu"]:
            busy = (now["cpu"][0] - last["cpu"][0]) / dt
            steal = (now["cpu"][1] - last["cpu"][1]) / dt
            # Clock ticks and process times are read a moment apart: a run that fills the machine can read a
            # little above its share. Never below 0 cores.
            line["others"] = round(max(0.0, busy - own) + max(0.0, steal), 3)
            line["steal"] = round(max(0.0, steal), 3)
        try:
            line["load1"] = round(os.getloadavg()[0], 2)
        except OSError:
            line["load1"] = None
        for key, name in (("cpu", "psi_cpu"), ("io", "psi_io"), ("memory", "psi_mem")):
            a, b = last["psi"][key], now["psi"][key]
            line[name] = None if a is None or b is None else round(min(1.0, max(0.0, (b - a) / 1e6 / dt)), 3)
        return line

    def start(self) -> HostSampler:
        self.sample()  # the baseline reading
        self._thread = threading.Thread(target=self._loop, name="host-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        deadline = time.monotonic() + self.max_duration
        with open(self.path, "a") as f:
            while not self._stop.wait(self.interval) and time.monotonic() < deadline:
                self._write(f)
            self._write(f)  # the last part-interval, so a short run has its tail

    def _write(self, f) -> None:
        try:
            line = self.sample()
        except Exception:  # noqa: BLE001 - a sample lost is a gap in the series, never a broken run
            return
        if line is not None:
            f.write(json.dumps(line) + "\n")
            f.flush()
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


# -- reading and summarising ---------------------------------------------------------------------------------------

def read_series(path: str) -> list[dict]:
    """host.jsonl's lines, in order; a torn last line (a killed run) is left out."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        return []
    return out


@dataclass(slots=True)
class HostSummary:
    """The host over a span of a run (the whole run or one phase): means over the samples in it, and the
    busiest second of others."""
    samples: int
    ncpu: int | None = None
    others: float | None = None  # cores, mean
    others_max: float | None = None
    own: float | None = None
    steal: float | None = None
    load1: float | None = None
    psi_cpu: float | None = None
    psi_io: float | None = None
    psi_mem: float | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    @classmethod
    def from_dict(cls, d: dict | None) -> HostSummary | None:
        if not d:
            return None
        return cls(**{k: d.get(k) for k in cls.__slots__})

    def text(self) -> str:
        """'others 0.98 cores (max 1.02), run 1.21, load 2.9, CPU pressure 31 %'"""
        if not self.samples or self.others is None:
            return "not measured"
        parts = [f"others {self.others:.2f} cores (max {self.others_max:.2f})", f"run {self.own:.2f}"]
        if self.steal and self.steal >= 0.01:
            parts.append(f"steal {self.steal:.2f}")
        if self.load1 is not None:
            parts.append(f"load {self.load1:.1f}")
        if self.psi_cpu is not None:
            parts.append(f"CPU pressure {self.psi_cpu * 100:.0f} %")
        return ", ".join(parts)


def summarize(series: list[dict], start: float | None = None, end: float | None = None) -> HostSummary:
    """The samples whose interval lies in [start, end] (a sample is stamped at its interval's end), summarised."""
    pts = [s for s in series
           if (start is None or s["t"] - s.get("dt", 0) >= start - 0.5) and (end is None or s["t"] <= end + 0.5)]
    if not pts:
        return HostSummary(0)

    def mean(key):
        vals = [s[key] for s in pts if s.get(key) is not None and math.isfinite(s[key])]
        return round(sum(vals) / len(vals), 3) if vals else None

    others = [s["others"] for s in pts if s.get("others") is not None]
    return HostSummary(len(pts), pts[-1].get("ncpu"), mean("others"), round(max(others), 3) if others else None,
                       mean("own"), mean("steal"), mean("load1"), mean("psi_cpu"), mean("psi_io"), mean("psi_mem"))


def differs(a: HostSummary | None, b: HostSummary | None, bound: float = DEFAULT_BOUND) -> str | None:
    """Why two spans' hosts are too different to compare their latency (others' mean CPU apart by more than
    `bound` cores), or None. A span not measured on either side is not a difference: the caller says it was
    not guarded."""
    if a is None or b is None or a.others is None or b.others is None:
        return None
    gap = b.others - a.others
    if abs(gap) > bound:
        return f"others used {a.others:.2f} and {b.others:.2f} cores ({gap:+.2f}, bound {bound:g})"
    return None


def host_report(run_dir: str, report: dict) -> dict | None:
    """report.json's "host": the series, and summaries over the load and over each phase (by its name), or None
    for a run with no host.jsonl (an older run)."""
    series = read_series(os.path.join(run_dir, HOST_FILE))
    if not series:
        return None
    phases = report.get("phases") or []
    start = report.get("load_started")
    end = max((p["end"] for p in phases if p.get("end") is not None), default=None)
    stopped = next((e["t"] for e in report.get("timeline") or [] if e.get("event") == Event.LOAD_STOPPED), None)
    end = stopped if stopped is not None else end
    return {"file": HOST_FILE, "ncpu": series[-1].get("ncpu"),
            "load": summarize(series, start, end).to_dict(),
            "phases": {p["name"]: summarize(series, p["start"], p["end"]).to_dict() for p in phases
                       if p.get("start") is not None and p.get("end") is not None},
            "series": [{k: s.get(k) for k in ("t", *FIELDS)} for s in series]}


def load_summary(report: dict) -> HostSummary | None:
    """The host over a run's load, from its report (None: not measured)."""
    return HostSummary.from_dict((report.get("host") or {}).get("load"))


def phase_summary(report: dict, phase: str) -> HostSummary | None:
    return HostSummary.from_dict(((report.get("host") or {}).get("phases") or {}).get(phase))
