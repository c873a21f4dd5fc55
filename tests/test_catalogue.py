"""The experiment catalogue: one file per scenario, each opening with what it proves, listed by `chaos list
experiments`, and each run green (or red, where it must fail) by some test in its short mode."""

import glob
import os
import subprocess
import sys

import pytest

from .run.test_runs import chaos_run, skip_if_not_judged

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# real engines and stacks: tests/run/test_stacks.py and test_engine_profiles.py
FILES = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.yaml"))) + [
    f for sub in ("stacks", "engines") for f in sorted(glob.glob(os.path.join(ROOT, "experiments", sub, "*.yaml")))]
NAMES = [os.path.basename(f)[:-len(".yaml")] for f in FILES]

# The experiments no other test runs, with their short mode (the faults early, a short load).
RUNS = {
    "oversized-input": ["--var", "LOAD_FOR=20s", "--var", "FAULT_AT=4s"],
    # its shared 1,000-token prompt needs the small preset's context (tiny's 1,024 tokens refuse it)
    "upgrade-check": ["--var", "LOAD_FOR=34s", "--var", "FAULT_AT=6s", "--var", "FLAKY_AT=22s",
                      "--var", "FLAKY_FOR=4s"],
}
MUST_FAIL = {"wedged-replica", "stability-garble"}  # proofs that a check can fail: their tests expect exit 1


def test_every_experiment_opens_with_what_it_proves():
    for f in FILES:
        with open(f) as fh:
            first = fh.readline()
        assert first.startswith("# Proves: ") and len(first) <= 121, f"{f}: {first!r}"
        if os.path.basename(f)[:-5] in MUST_FAIL:
            assert "FAILS on purpose" in first, f


def test_the_list_is_one_line_per_experiment_saying_what_it_proves():
    r = subprocess.run([sys.executable, "-m", "chaos", "list", "experiments"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(FILES)
    for line, f in zip(lines, FILES):
        with open(f) as fh:
            proves = fh.readline()[len("# Proves: "):].strip()
        assert line.startswith(os.path.relpath(f, ROOT)) and line.endswith(proves), line


def test_every_experiment_is_run_by_a_test():
    here = os.path.abspath(__file__)
    text = ""
    for path in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True):
        if os.path.abspath(path) != here:
            with open(path) as f:
                text += f.read()
    unrun = [n for n in NAMES if n not in RUNS and f'"{n}' not in text and f"/{n}.yaml" not in text]
    assert not unrun, f"no test runs {unrun}: add a short mode to RUNS here"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RUNS))
def test_it_runs_green_in_its_short_mode(tmp_path, name):
    run_dir = tmp_path / "run"
    r = chaos_run(os.path.join(ROOT, "experiments", f"{name}.yaml"), run_dir, *RUNS[name])
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"{name}: PASSED" in r.stdout
