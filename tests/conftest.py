"""Fixtures shared across packages: one real run with three faults, made once per session and asserted on by the
recovery, report-page and metrics tests (each whole run costs the suite a minute on two cores)."""

import inspect
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

THREE_FAULTS = """\
name: recovery-truth
target:
  kind: reference
  replicas: 2
  preset: tiny
  startup_timeout: 60s
  gateway: {retries: 2, first_token_timeout: auto, stream_idle_timeout: 2s, total_timeout: 30s,
            eject: {after_failures: 3, for: 5s}}
load: {workload: chat, users: 4, duration: 31s, input_tokens: 30-60, output_tokens: 16-24,
       timeouts: {connect: 2s, first_token: 10s, total: 20s}}
steady_state: {window: 5s, slo: {p95_latency: 5s, error_rate: 1%}}
metrics: {interval: 500ms}
faults:
  - {type: kill_instance, name: kill-r1, at: 5s, instance: r1, signal: SIGKILL, restart_after: 2s}
  - {type: stream_stall, name: stall-r1, at: 14s, link: r1, after_tokens: 4, stall_for: 30s, duration: 4s}
  - {type: link_down, name: down, at: 23s, link: client, duration: 2s}
verify:
  recovery_time: {max: 20s, window: 3s}
  status_codes: {allowed: [200]}
"""


@dataclass
class RealRun:
    out: Path  # the run directory
    process: subprocess.CompletedProcess

    @property
    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())


@pytest.fixture(scope="session")
def three_faults_run(tmp_path_factory) -> RealRun:
    """A replica SIGKILLed and restarted, its stream stalled by the LLM proxy, the client's link taken down, under
    chat load through the gateway; /metrics scraped every 500 ms."""
    d = tmp_path_factory.mktemp("three-faults")
    exp = d / "recovery-truth.yaml"
    exp.write_text(THREE_FAULTS)
    out = d / "run"
    p = subprocess.run([sys.executable, "-m", "chaos", "run", str(exp), "--out", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert (out / "report.json").exists(), p.stdout[-3000:] + p.stderr[-3000:]
    return RealRun(out, p)


GROUP = "whole-runs"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the group into the node id
def pytest_collection_modifyitems(config, items):
    """Under `-n 2 --dist loadgroup` (the README's test command), every slow test (the whole runs, the gateway's
    and the engine's own processes) runs on one worker, one after another as without xdist, so no whole run
    has another beside it; the unit tests, and slow tests marked `beside` (they judge nothing by time), run on
    the other worker meanwhile. A whole run is bound by its load's seconds and leaves the second core mostly
    idle (.ci/run's header has the times)."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("beside"):
            item.add_marker(pytest.mark.xdist_group(GROUP))


def pytest_configure(config):
    """xdist groups by a suffix it writes into each item's node id; under a pytest whose node ids it cannot write
    (9.2 made them structured) it would spread the whole runs over both workers without a word. Say so."""
    if config.getoption("dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    from _pytest.nodes import Node

    try:
        writable = "_nodeid" in inspect.getsource(Node.nodeid.fget)
    except (OSError, TypeError):
        return
    if not writable:
        raise pytest.UsageError(f"pytest-xdist cannot group tests under pytest {pytest.__version__} (the whole runs "
                                f"would run beside each other): pip install -e '.[test]' installs the pinned versions")


@pytest.fixture(scope="package")
def vendor():
    """One reference server standing in for a vendor's endpoint (openai targets), for every run that needs one:
    each run's proxies and records are its own, so the server carries nothing from one run to the next."""
    from chaos.reference.launcher import start_server

    with start_server(["--preset", "tiny", "--replica-id", "vendor"]) as srv:
        yield srv
