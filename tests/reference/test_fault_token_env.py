"""conftest.py's fault token lives in the environment only while this package's tests run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from chaos.common import FAULT_TOKEN_ENV

ROOT = Path(__file__).resolve().parents[2]
PROBE = f"""
import os

def test_no_token_is_left_in_the_environment():
    assert {FAULT_TOKEN_ENV!r} not in os.environ
"""


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_the_token_is_set_here_and_gone_for_tests_outside_the_package(tmp_path, fault_token):
    assert os.environ[FAULT_TOKEN_ENV] == fault_token
    probe = tmp_path / "test_probe_outside.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != FAULT_TOKEN_ENV}
    # A test of this package first (so its fixture runs), then one outside it, in one pytest session.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                        "-c", str(ROOT / "pyproject.toml"), str(ROOT / "tests/reference/test_tokenizer.py"),
                        str(probe)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "passed" in r.stdout and "test_probe_outside" not in r.stdout.split("short test summary")[-1]
