"""scripts/layout_figures.py, the figures issue 43 set targets for, measured from the source: it runs, and says
what the tree's own tests hold (no file circle, no package pair, no private name across packages, no exception
class outside the error tree)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_figures_are_what_the_contracts_hold():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "layout_figures.py")], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)
    assert lines["file circles"] == "0"
    assert lines["package pairs importing each other"].strip() == "0"
    assert lines["private names imported across packages"].strip() == "0"
    assert lines["exception classes outside the error tree"].strip() == "0"
    assert int(lines["upward imports let through by the layers contract"].split()[0]) <= 6
    assert int(lines["imports inside functions"].split()[0]) > 0
