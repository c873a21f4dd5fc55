"""`chaos selftest soak`: one long real run at steady load with a fault of every family in turn, every period,
and the memory of every process of the run sampled meanwhile.

What must hold, each a problem when it does not:
  - the run ends by itself (not interrupted, no setup error) and every fault it applied was reverted;
  - records keep flowing: every WINDOW_S of the load has requests on record;
  - memory stays flat: for each process of the run (the runner, Locust, each replica, the gateway, the proxies),
    the peak RSS of each cycle of faults (every family once). The first two cycles warm up (imports, allocator
    arenas, caches, the runner's windows filling); from four cycles after them (six in all), the peaks'
    least-squares slope (scipy.stats.linregress) is stated in MB/h with its 95 % interval, and a process grows
    when the whole interval is above zero and the fitted growth passes GROWTH_MB (and 10 %).
The short soak in CI (110 s, two cycles) is too short to judge memory: it checks that every fault is reverted,
that records keep flowing and that every process is sampled. The long mode (`--duration 30m`, the default: 11
cycles of 160 s) judges memory.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

from ..rundir.files import JOURNAL, REPORT_JSON, REQUESTS
from ..rundir.journal import Event
from ..rundir.procs import marked, run_id_for

WINDOW_S = 5.0
GROWTH_MB = 8.0
WARM_CYCLES = 2  # left out of the judgement
MIN_POINTS = 4   # cycles after the warm-up before memory is judged: six in all

# One fault of every family, in turn; @D@ is each one's duration (half the period), @R@ the restart delay.
CYCLE = [
    "{type: kill_instance, instance: r1, signal: SIGKILL, restart_after: @R@}",
    "{type: latency, link: r0, latency: 50ms, jitter: 20ms, duration: @D@}",
    "{type: stream_stall, link: r1, after_tokens: 2, stall_for: 3s, duration: @D@}",
    "{type: abnormal_inputs, serve_within: 30s}",
    "{type: pause_instance, instance: r0, duration: @D@}",
    "{type: link_down, link: r1, duration: @D@}",
    "{type: http_error, link: client, status: 503, probability: 20%, duration: @D@}",
    "{type: server_hook, instance: r0, step_delay_ms: 20, duration: @D@}",
]


def experiment(duration_s: float, period_s: float, first_s: float = 10.0) -> str:
    """The soak's experiment: two tiny replicas behind the gateway, steady chat load, a fault every period."""
    faults, at = [], first_s
    while at + period_s / 2 <= duration_s - 5:
        f = CYCLE[len(faults) % len(CYCLE)]
        faults.append(f.replace("@D@", f"{period_s / 2:g}s").replace("@R@", "2s")[:-1] + f", at: {at:g}s}}")
        at += period_s
    lines = ["name: soak", "description: steady load, a fault of every family in turn, memory sampled",
             "target: {kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s, gateway: {retries: 2, "
             "first_token_timeout: 5s, stream_idle_timeout: 2s, total_timeout: 30s, eject: {after_failures: 3, "
             "for: 5s}}}",
             f"load: {{workload: chat, users: 4, duration: {duration_s:g}s, input_tokens: 30-60, "
             "output_tokens: 8-24, timeouts: {connect: 2s, first_token: 10s, total: 20s}}", "faults:"]
    return "\n".join(lines + [f"  - {f}" for f in faults]) + "\n"


@dataclass(slots=True)
class Series:
    name: str                        # runner, locust, r0, gw, ... (a restarted replica is a new series)
    pid: int
    t: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)

    def verdict(self, cycle_s: float) -> dict:
        """Peak RSS per cycle of faults (each cycle meets every family once, so each has the same bursts: an
        abnormal-input batch's big bodies, a restart): a leak is a peak that keeps rising. The first WARM_CYCLES
        are warm-up (imports, allocator arenas, caches, the runner's windows filling) and left out; from
        MIN_POINTS cycles after them, the peaks' least-squares slope (MB/h) with its 95 % interval. grows: the
        whole interval is above zero and the fitted growth over those cycles passes GROWTH_MB (and 10 %). Peaks
        that swing (the runner: 250-385 MB from one cycle to the next) are no trend."""
        out = {"name": self.name, "pid": self.pid, "samples": len(self.t),
               "rss_mb": [round(self.rss_mb[0], 1), round(self.rss_mb[-1], 1)] if self.t else None,
               "peaks_mb": [], "growth_mb": None, "slope_mb_h": None, "interval": None, "grows": False}
        if not self.t:
            return out
        peaks: dict[int, float] = {}
        for t, y in zip(self.t, self.rss_mb):
            k = int((t - self.t[0]) // cycle_s)
            peaks[k] = max(peaks.get(k, 0.0), y)
        whole = [peaks[k] for k in sorted(peaks) if (k + 1) * cycle_s <= self.t[-1] - self.t[0] + _step(self)]
        out["peaks_mb"] = [round(p, 1) for p in whole]
        judged = whole[WARM_CYCLES:]
        if len(judged) < MIN_POINTS:
            return out
        from scipy import stats

        xs = [k * cycle_s for k in range(len(judged))]
        fit = stats.linregress(xs, judged)
        err = float(fit.stderr or 0.0) * float(stats.t.ppf(0.975, len(xs) - 2)) * 3600
        slope = float(fit.slope) * 3600
        growth = slope / 3600 * xs[-1]
        bound = max(GROWTH_MB, 0.1 * statistics.fmean(judged))
        out.update(slope_mb_h=round(slope, 2), interval=[round(slope - err, 2), round(slope + err, 2)],
                   growth_mb=round(growth, 2), grows=bool(slope - err > 0 and growth > bound))
        return out


def _step(s: Series) -> float:
    """One sampling step: a cycle whose last sample is a step short of its end still counts as whole."""
    return (s.t[-1] - s.t[0]) / max(1, len(s.t) - 1) * 1.5


class Sampler(threading.Thread):
    """Every interval: each live process carrying the run's mark, named from the journal, and its RSS."""

    def __init__(self, run_dir: str, interval: float = 1.0):
        super().__init__(name="soak-sampler", daemon=True)
        self.run_dir, self.interval = run_dir, interval
        self.series: dict[int, Series] = {}
        self._names: dict[int, str] = {}
        self._offset = 0
        self._done = threading.Event()

    def names(self) -> dict[int, str]:
        """pid -> name from the journal's lines written since the last call (the journal only grows: a soak's
        has thousands of lines, read once each, not once a second)."""
        path = os.path.join(self.run_dir, JOURNAL)
        if os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            whole = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read next time
            self._offset += len(whole)
            for line in whole.splitlines():
                try:
                    self._note(json.loads(line))
                except ValueError:
                    continue
        return self._names

    def _note(self, e: dict) -> None:
        if e.get("event") == Event.RUN_STARTED:
            self._names[e["pid"]] = "runner"
        inst = e.get("instance") if e.get("event") == Event.PROCESS_STARTED else None
        if isinstance(inst, dict) and inst.get("pid"):
            self._names[inst["pid"]] = str(inst.get("id"))
        for p in e.get("processes") or [] if e.get("event") == Event.LOAD_STARTED else []:
            self._names[p["pid"]] = "locust"

    def run(self) -> None:
        run_id = run_id_for(self.run_dir)
        t0 = time.monotonic()
        while not self._done.is_set():
            names = self.names()
            runner = [_process(pid) for pid, name in names.items() if name == "runner"]
            # the runner sets the mark for its children: its own environment (read from /proc) has none
            for p in [r for r in runner if r is not None] + marked(run_id):
                try:
                    rss = p.memory_info().rss / 1e6
                except psutil.Error:
                    continue
                s = self.series.get(p.pid)
                if s is None:
                    s = self.series[p.pid] = Series(names.get(p.pid) or _child_name(p, names), p.pid)
                elif s.name.endswith("child") and p.pid in names:
                    s.name = names[p.pid]
                s.t.append(time.monotonic() - t0)
                s.rss_mb.append(rss)
            self._done.wait(self.interval)

    def stop(self) -> None:
        self._done.set()
        self.join(10)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _child_name(p: psutil.Process, names: dict[int, str]) -> str:
    """A process the journal does not name: its parent's name and "child" (a replica's body worker)."""
    try:
        return f"{names.get(p.ppid()) or p.name()} child"
    except psutil.Error:
        return "child"


def soak(workdir: str, duration_s: float, period_s: float) -> dict:
    """Run it; returns the counts, the problems and every process's memory verdict."""
    os.makedirs(workdir, exist_ok=True)
    exp = os.path.join(workdir, "soak.yaml")
    with open(exp, "w") as f:
        f.write(experiment(duration_s, period_s))
    run_dir = os.path.join(workdir, "run")
    sampler = Sampler(run_dir)
    with open(os.path.join(workdir, "output.txt"), "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", exp, "--out", run_dir], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    sampler.start()
    problems: list[str] = []
    try:
        code = proc.wait(duration_s + 180)
    except subprocess.TimeoutExpired:
        problems.append(f"the run did not end within {duration_s + 180:.0f} s; interrupted")
        proc.send_signal(2)
        code = proc.wait(60)
    except KeyboardInterrupt:
        proc.send_signal(2)  # its own Ctrl-C: it rolls back and writes its report
        proc.wait(60)
        raise
    finally:
        sampler.stop()
    return judge(run_dir, code, sampler.series.values(), problems, period_s * len(CYCLE))


def judge(run_dir: str, code: int, series, problems: list[str], cycle_s: float) -> dict:
    if code not in (0, 1, 4):
        problems.append(f"the run exited {code} (see {run_dir}/report.md)")
    rep = {}
    if os.path.exists(os.path.join(run_dir, REPORT_JSON)):
        with open(os.path.join(run_dir, REPORT_JSON)) as f:
            rep = json.load(f)
    faults = rep.get("faults") or []
    problems += [f"fault {f['name']} not applied: {f.get('apply_error')}" for f in faults if not f["applied"]]
    problems += [f"fault {f['name']} not reverted: {f.get('revert_error')}" for f in faults
                 if f["applied"] and not f["reverted"]]
    empty, windows = _quiet_windows(run_dir, rep)
    problems += [f"no request recorded in the window {a:.0f}-{a + WINDOW_S:.0f} s of the load" for a in empty]
    memory = [s.verdict(cycle_s) for s in series]
    problems += [f"{m['name']} (pid {m['pid']}) grows {m['slope_mb_h']} MB/h [{m['interval'][0]}, "
                 f"{m['interval'][1]}]: peak RSS per cycle {m['peaks_mb']} MB" for m in memory if m["grows"]]
    return {"verdict": rep.get("verdict"), "exit_code": code, "faults": len(faults),
            "families": sorted({f["type"] for f in faults}), "reverted": sum(bool(f["reverted"]) for f in faults),
            "requests": rep.get("requests"), "windows": windows, "quiet_windows": len(empty), "memory": memory,
            "cycle_s": cycle_s, "bound": {"growth_mb": GROWTH_MB, "growth_share": 0.1}, "problems": problems}


def _quiet_windows(run_dir: str, rep: dict) -> tuple[list[float], int]:
    """Starts (s from load start) of the load's WINDOW_S windows with no request recorded, and how many."""
    t0 = rep.get("load_started")
    path = os.path.join(run_dir, REQUESTS)
    if t0 is None or not os.path.exists(path):
        return [], 0
    starts = []
    with open(path) as f:
        for line in f:
            try:
                starts.append(json.loads(line)["t_start"] - t0)
            except (ValueError, KeyError, TypeError):
                continue
    if not starts:
        return [0.0], 1
    n = max(1, math.floor(max(starts) / WINDOW_S))
    seen = {int(s // WINDOW_S) for s in starts if s >= 0}
    return [i * WINDOW_S for i in range(n) if i not in seen], n


def render(r: dict) -> str:
    lines = [f"soak: run {r['verdict']} (exit {r['exit_code']}), {r['faults']} faults of {len(r['families'])} "
             f"families ({', '.join(r['families'])}), {r['reverted']} reverted; {r['requests']} requests, "
             f"{r['windows'] - r['quiet_windows']} of {r['windows']} {WINDOW_S:g} s windows with requests",
             "", f"memory: peak RSS per {r['cycle_s']:g} s cycle of faults; from the third, the slope with its 95 % "
                 f"interval (grows: above 0, and > {GROWTH_MB:g} MB and 10 % in all)",
             f"  {'process':<16}{'pid':>8}{'samples':>9}  {'peaks MB':<34}{'MB/h [95 %]':>26}"]
    for m in sorted(r["memory"], key=lambda m: (m["name"], m["pid"])):
        peaks = " ".join(f"{p:.0f}" for p in m["peaks_mb"][:6]) + (" ..." if len(m["peaks_mb"]) > 6 else "")
        slope = (f"{m['slope_mb_h']:+.1f} [{m['interval'][0]:+.1f}, {m['interval'][1]:+.1f}]"
                 if m["slope_mb_h"] is not None else "")
        judged = "" if m["growth_mb"] is not None else f"  (not judged: under {WARM_CYCLES + MIN_POINTS} cycles)"
        lines.append(f"  {m['name'][:16]:<16}{m['pid']:>8}{m['samples']:>9}  {peaks:<34}{slope:>26}"
                     + ("  GROWS" if m["grows"] else judged))
    lines += ["", "problems: none" if not r["problems"] else "problems:"] + [f"  - {p}" for p in r["problems"]]
    return "\n".join(lines)
