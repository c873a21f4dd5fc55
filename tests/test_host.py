"""The host measured in every run (chaos.host): real processes burn real CPU, and the sampler must put a
descendant's CPU in the run's own column and a stranger's in others', whatever else the machine does. Asserted
against the processes' own CPU times (psutil), not against wall time: a busy box slows the burners, never the
accounting."""

import json
import os
import resource
import subprocess
import sys
import time

import psutil
import pytest

from chaos.host import (HOST_FILE, HostSampler, HostSummary, differs, host_report, own_cpu, read_series,
                        summarize)

BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def _cpu(pid) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def test_a_descendants_cpu_is_the_runs_own_alive_and_after_it_is_reaped():
    before = own_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.0)])
    time.sleep(0.5)
    burnt = _cpu(child.pid)
    assert own_cpu(os.getpid()) - before >= 0.9 * burnt > 0
    child.wait()  # reaped: its whole time is in our children times now, and counted there
    assert own_cpu(os.getpid()) - before >= 0.9 * burnt


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_a_child_is_own_and_a_stranger_is_others(tmp_path):
    """One sampler; first a child burns, then a process that is not our descendant (sh backgrounds it and exits,
    so it is reparented away from us)."""
    path = tmp_path / HOST_FILE
    s = HostSampler(str(path), interval=0.25).start()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.5)])
    child.wait()
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = r.ru_utime + r.ru_stime - r0.ru_utime - r0.ru_stime
    time.sleep(0.3)  # the child's last interval sampled
    mark = time.time()
    out = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BURN.format(s=1.5)}' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True)
    stranger = int(out.stdout.strip())
    assert stranger not in [p.pid for p in psutil.Process().children(recursive=True)]
    burnt, deadline = 0.0, time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            burnt = _cpu(stranger)
        except psutil.Error:
            break
        time.sleep(0.1)
    time.sleep(0.3)
    s.stop()
    series = read_series(str(path))
    own = sum(x["own"] * x["dt"] for x in series if x["t"] <= mark)
    others = sum(x["others"] * x["dt"] for x in series if x["t"] > mark)
    assert own >= 0.8 * child_cpu > 0, (own, child_cpu)
    assert others >= 0.8 * burnt > 0, (others, burnt)
    assert all(set(x) >= {"t", "dt", "ncpu", "others", "own", "steal", "load1", "psi_cpu"} for x in series)


def test_the_sampler_stops_by_itself_at_its_bound(tmp_path):
    s = HostSampler(str(tmp_path / HOST_FILE), interval=0.05, max_duration=0.3).start()
    time.sleep(1.0)
    n = len(read_series(str(tmp_path / HOST_FILE)))
    time.sleep(0.3)
    assert n == len(read_series(str(tmp_path / HOST_FILE))) and 2 <= n <= 10
    s.stop()


def test_bad_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="interval"):
        HostSampler(str(tmp_path / HOST_FILE), interval=0)


SERIES = [{"t": 100.0 + i, "dt": 1.0, "ncpu": 2, "others": o, "own": 1.5, "steal": 0.0, "load1": 2.0,
           "psi_cpu": 0.3, "psi_io": 0.0, "psi_mem": 0.0}
          for i, o in enumerate([0.0, 0.02, 0.01, 1.0, 0.98, 1.02, 0.99, 0.0, 0.01, 0.0])]


def test_summaries_of_spans_and_the_guards_bound():
    # a sample stamped t covers (t - dt, t]: the busy ones cover 102-106
    quiet, busy = summarize(SERIES, 99.0, 102.0), summarize(SERIES, 102.0, 106.0)
    assert quiet.samples == 3 and quiet.others == pytest.approx(0.01, abs=0.01)
    assert busy.others == pytest.approx(1.0, abs=0.02) and busy.others_max == 1.02
    assert differs(quiet, busy) and "0.01 and 1.00 cores" in differs(quiet, busy)
    assert busy.samples == 4 and differs(quiet, summarize(SERIES, 106.0, 109.0)) is None
    assert differs(quiet, None) is None and differs(quiet, HostSummary(0)) is None
    assert "others 1.00 cores (max 1.02), run 1.50, load 2.0, CPU pressure 30 %" == busy.text()
    assert HostSummary(0).text() == "not measured"


def test_host_report_has_the_series_the_load_and_each_phase(tmp_path):
    (tmp_path / HOST_FILE).write_text("".join(json.dumps(x) + "\n" for x in SERIES) + '{"t": 1')  # a torn line
    report = {"load_started": 99.0, "phases": [{"name": "steady state", "start": 99.0, "end": 102.0},
                                                {"name": "kill-r1", "start": 102.0, "end": 106.0}],
              "timeline": [{"event": "load_stopped", "t": 110.0}]}
    h = host_report(str(tmp_path), report)
    assert len(h["series"]) == len(SERIES) and h["ncpu"] == 2
    assert h["phases"]["kill-r1"]["others"] > 0.9 and h["phases"]["steady state"]["others"] < 0.05
    assert h["load"]["samples"] == 10 and h["phases"]["kill-r1"]["samples"] == 4
    assert host_report(str(tmp_path / "none"), report) is None
