"""Output stability on real runs of the two shipped experiments (the real reference replicas, gateway, LLM fault
proxy and Locust; tiny preset, 15 s and 12 s of load): a replica crash leaves every probe's answer identical, from
either replica and the restarted one; garbled and replaced answers fail the stability check, and nothing else."""

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from chaos.records import read_records
from chaos.verify.stability import stability_report

pytestmark = pytest.mark.slow

SHORT = ["--var", "LOAD_FOR=15s", "--var", "FAULT_AT=4s", "--var", "FAULT_FOR=6s"]
# Garbling judges nothing after its revert (only error rates: the steady re-check's 6 s and the fault's, and the
# probes' answers, compared with theirs before it): 2 s of load after it, not 5 s.
GARBLE_SHORT = ["--var", "LOAD_FOR=12s", "--var", "FAULT_AT=4s", "--var", "FAULT_FOR=6s"]


def _run(tmp_path_factory, name, short=SHORT):
    out = tmp_path_factory.mktemp(name) / "run"
    # the faults from 4 s (the 6 s steady window is clipped to the load's start), 6 s of garbling, and the kill's
    # restart 4 s later as shipped: r1 back by ~10 s, 5 s before the end, for the probes it serves again
    p = subprocess.run([sys.executable, "-m", "chaos", "run", f"experiments/{name}.yaml", "--var", "PRESET=tiny",
                        *short, "--out", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert (out / "report.json").exists(), p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    return p.returncode, report, read_records(str(out / "requests.jsonl"))


@pytest.fixture(scope="module")
def kill(tmp_path_factory):
    return _run(tmp_path_factory, "stability-kill")


@pytest.fixture(scope="module")
def garble(tmp_path_factory):
    return _run(tmp_path_factory, "stability-garble", GARBLE_SHORT)


def _check(report, name):
    return next(c for c in report["checks"] if c["name"] == name)


def _phases(report):
    return [(f["applied_at"], f["reverted_at"], f["name"]) for f in report["faults"] if f["applied"]]


def test_a_replica_crash_leaves_every_probe_answer_identical(kill):
    code, report, records = kill
    c = _check(report, "stability: identical outputs")
    assert c["status"] == "passed" and c["measured"].startswith("100.00%"), c
    n = int(c["measured"].rsplit("(n=", 1)[1].rstrip(")"))
    assert n >= 10 and c["threshold"] == ">= 100%"
    assert code == 0 and report["verdict"] == "passed", [x for x in report["checks"] if x["status"] != "passed"]
    # the off categories are reported, not checks
    assert not any(x["name"] in ("stability: garbled text", "stability: JSON validity") for x in report["checks"])


def test_both_replicas_and_the_restarted_one_give_each_probe_the_same_answer(kill):
    _, report, records = kill
    answers = defaultdict(set)
    servers = defaultdict(set)
    for r in records:
        if r.stability_key and r.outcome == "ok":
            answers[r.stability_key].add(r.output_sha)
            servers[r.stability_key].add(r.served_by)
    assert len(answers) == 4 and all(len(s) == 1 for s in answers.values()), answers
    assert any({"r0", "r1"} <= s for s in servers.values()), servers
    kill_end = report["faults"][0]["reverted_at"]
    assert any(r.stability_key and r.served_by == "r1" and r.t_start > kill_end for r in records)  # restarted r1


def test_garbled_and_replaced_answers_fail_the_stability_check_alone(garble):
    code, report, records = garble
    assert code == 1 and report["verdict"] == "failed"
    failed = [c["name"] for c in report["checks"] if c["status"] == "failed"]
    assert failed == ["stability: identical outputs"], report["checks"]
    assert _check(report, "status codes")["status"] == "passed"
    assert _check(report, "error rate during the fault")["status"] == "passed"
    c = _check(report, "stability: identical outputs")
    assert "garble-r1 + replace-r0" in c["detail"] and ("garble-r1; garble" in c["detail"]
                                                       or "replace-r0; replace_text" in c["detail"]), c["detail"]


def test_the_report_section_names_the_changed_answers(garble):
    _, report, records = garble
    section = stability_report(records, {"identical": "100%", "json_valid": "off", "max_repetition": "off",
                                         "max_garbled": "off"}, _phases(report))
    ident = section["identical"]
    assert ident["status"] == "failed" and ident["failures"] > 0 and ident["examples"]
    assert ident["by_phase"]["before faults"]["count"] == ident["by_phase"]["before faults"]["n"] > 0
    for ex in ident["examples"]:
        assert ex["phase"] == "garble-r1 + replace-r0" and ex["expected_sha"] != ex["got_sha"]
        assert ex["fault"] and ex["served_by"] in ("r0", "r1") and ex["key"].startswith("s")
        if "replace_text" in ex["fault"]:
            assert ex["got_head"] == "I cannot help with that."
    # the rates the experiment turned off are still in the section
    assert section["garbled"]["status"] == "off" and section["garbled"]["rate"]["n"] > 0
    assert section["json_valid"]["status"] == "off" and section["json_valid"]["n"] > 0
