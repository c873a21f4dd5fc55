"""The fault schedule, abort windows and restart durations run on the monotonic clock, and the runner's
timestamps (journal, fault times) on the records' clock (the load's start plus monotonic time): a step of the
wall clock (NTP, a VM stalled or resumed) neither fires a fault early nor holds it back."""

import os
import subprocess
import sys

import pytest

from chaos.rundir.journal import read_journal

from .conftest import leftovers, unreverted

pytestmark = pytest.mark.slow  # a whole run

SCHEDULE = """\
name: clock-step
target: {kind: reference, replicas: 1, preset: tiny, startup_timeout: 60s}
load: {workload: chat, users: 2, duration: 8s, output_tokens: 4}
faults:
  - {type: server_hook, at: 4s, step_delay_ms: 1, duration: 1s}
"""

# The real runner, whose wall clock reads an hour ahead of the load's: as if the clock stepped once the load
# began. A schedule on the wall clock fires every fault at once.
STEPPED = """\
import sys
import time
import types

import chaos.run.runner as runner
from chaos.cli import main

runner.time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
runner.time.time = lambda: time.time() + 3600
sys.exit(main(sys.argv[1:]))
"""


def test_a_wall_clock_step_does_not_move_the_schedule(tmp_path):
    f = tmp_path / "clock.yaml"
    f.write_text(SCHEDULE)
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", STEPPED, "run", str(f), "--out", str(run_dir)], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode in (0, 1, 4), r.stdout[-2000:] + r.stderr[-2000:]
    assert (run_dir / "journal.jsonl").exists(), r.stdout[-2000:] + r.stderr[-2000:]
    events = read_journal(os.path.join(run_dir, "journal.jsonl"))  # the journal's clock was not stepped
    t = {e["event"]: e["t"] for e in reversed(events)}  # the first of each
    assert t["fault_applying"] - t["load_started"] >= 3.5, "the fault fired before its 4 s"
    assert unreverted(run_dir) == [] and leftovers(run_dir) == []


GATED = """\
name: slow-import
target: {kind: reference, replicas: 1, preset: tiny, startup_timeout: 60s}
load: {workload: chat, users: 2, duration: 8s, output_tokens: 4}
steady_state: {window: 3s, slo: {p95_latency: 5s, error_rate: 1%}}
faults:
  - {type: server_hook, at: 4s, step_delay_ms: 1, duration: 1s}
"""

# Any thread but the main one that imports scipy.stats takes SLOW_S over it, holding the import's lock: the run's
# warm-up thread on a busy box (CI's ran at nice 19 beside a neighbour's CPU-bound tests).
SLOW_IMPORT = """\
import os, sys, threading, time


class _SlowLoader:  # sleeps while the module's own import lock is held, as a slow import's code would
    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        time.sleep(float(os.environ["CHAOS_TEST_SLOW_IMPORT_S"]))
        self.real.exec_module(module)


class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name != "scipy.stats" or threading.current_thread() is threading.main_thread():
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _SlowLoader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Slow())
"""


def test_a_slow_background_import_does_not_hold_the_fault_schedule(tmp_path):
    """The steady-state gate needs scipy.stats. Waited for in the main loop, an import still under way on the
    warm-up thread held each fault back until after the load had ended, and the run judged nothing it was meant
    to ("error rate during the fault: -"): the run now has it imported before its load starts."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_IMPORT)
    f = tmp_path / "gated.yaml"
    f.write_text(GATED)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path]), "CHAOS_TEST_SLOW_IMPORT_S": "10"}
    r = subprocess.run([sys.executable, "-m", "chaos", "run", str(f), "--out", str(run_dir)], capture_output=True,
                       text=True, timeout=240, env=env)
    assert (run_dir / "journal.jsonl").exists(), r.stdout[-2000:] + r.stderr[-2000:]
    events = read_journal(os.path.join(run_dir, "journal.jsonl"))
    t = {e["event"]: e for e in reversed(events)}  # the first of each
    took = t["fault_applying"]["t"] - t["load_started"]["t"]
    assert 3.5 <= took < 7.0, f"the fault meant for 4 s in was applied {took:.1f}s in"
    assert t["warm_imports"]["waited_s"] > 5, t["warm_imports"]  # it did wait, before the load
    assert t["warm_imports"]["t"] <= t["load_started"]["t"]
    assert "loading scipy.stats before the load starts" in r.stdout
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert unreverted(run_dir) == [] and leftovers(run_dir) == []
