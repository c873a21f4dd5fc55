"""`chaos report --compare A B` on two real load runs against one real reference server: the second with every
engine step made 3x slower (the server's step_slowdown hook) must come out worse on E2E, and a run compared with
itself must show no change."""

import json
import subprocess
import sys
import urllib.request

import pytest

from chaos.common import FAULT_TOKEN_HEADER
from chaos.reference.launcher import start_server

pytestmark = pytest.mark.slow


def _load(url, out):
    p = subprocess.run([sys.executable, "-m", "chaos", "load", url, "--users", "3", "--duration", "4s",
                        "--output-tokens", "16", "--out", str(out), "--interval", "3600", "--seed", "0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    with start_server(["--preset", "tiny", "--enable-fault-hooks", "--log-level", "error"]) as server:
        a = _load(server.base_url, d / "a")
        req = urllib.request.Request(server.base_url + "/admin/faults", method="POST",
                                     data=json.dumps({"step_slowdown": 3.0}).encode(),
                                     headers={"Content-Type": "application/json",
                                              FAULT_TOKEN_HEADER: server.fault_token})
        urllib.request.urlopen(req, timeout=10).close()
        b = _load(server.base_url, d / "b")
    return d, a, b


def _compare(a, b, out):
    p = subprocess.run([sys.executable, "-m", "chaos", "report", "--compare", str(a), str(b), "--out", str(out)],
                       capture_output=True, text=True, timeout=180)
    comp = json.loads((out / "comparison.json").read_text()) if (out / "comparison.json").exists() else None
    return p, comp


def test_a_slower_candidate_is_worse_on_e2e(runs):
    d, a, b = runs
    p, comp = _compare(a, b, d / "ab")
    p50 = next(f for f in comp["figures"] if f["figure"] == "whole load E2E p50")
    assert p50["ratio"]["low"] > 1.5  # 3x slower steps: the E2E ratio's interval is well above 1
    # both `chaos load` runs sampled their host, shown side by side
    assert comp["host"]["measured"] and comp["host"]["a"]["samples"] > 0 and comp["host"]["b"]["samples"] > 0
    md = (d / "ab" / "comparison.md").read_text()
    assert "| host | A | B |" in md
    if "whole load" in comp["host"]["differs"]:  # a busy box's neighbour came or went between the two loads
        assert p50["verdict"] == "not judged" and p50["verdict_host"] == "worse" and "host differed" in p50["why"]
        assert "Warning: the host differed" in md and "warning: the host differed" in p.stderr
        return
    assert p.returncode == 1, p.stdout + p.stderr
    verdicts = {f["figure"]: f["verdict"] for f in comp["figures"]}
    assert verdicts["whole load E2E p50"] == "worse" and verdicts["whole load E2E distribution"] == "worse"
    assert md.count("WORSE") >= 2
    assert "WORSE" in p.stdout and "comparison:" in p.stdout
    for f in comp["figures"]:  # every verdict carries its corrected p-value
        assert f["verdict"] == "not judged" or f["p_holm"] is not None


def test_a_run_against_itself_shows_no_change(runs):
    d, a, _ = runs
    p, comp = _compare(a, a, d / "aa")
    assert p.returncode == 0, p.stdout + p.stderr
    assert {f["verdict"] for f in comp["figures"]} <= {"no detectable change", "not judged"}


def test_bad_input_says_what_to_do(tmp_path):
    p = subprocess.run([sys.executable, "-m", "chaos", "report", "--compare", str(tmp_path), str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "no requests.jsonl" in p.stderr
