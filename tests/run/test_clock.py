"""The fault schedule, abort windows and restart durations run on the monotonic clock, and the runner's
timestamps (journal, fault times) on the records' clock (the load's start plus monotonic time): a step of the
wall clock (NTP, a VM stalled or resumed) neither fires a fault early nor holds it back."""

import os
import subprocess
import sys

import pytest

from chaos.run.journal import read_journal

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
