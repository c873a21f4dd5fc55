"""Input faults in whole runs: the shipped abnormal-inputs experiment passes against the reference target with every
case judged per destination, and wedged-replica (a replica the reference server's wedge_on hook wedges on a NUL
byte) fails, naming the case and that the replica needed a restart: the check is proven able to fail."""

import json

from .conftest import leftovers, report, unreverted
from .test_runs import chaos_run, skip_if_not_judged

TINY = ["--var", "PRESET=tiny"]


def test_abnormal_inputs_every_case_answered_as_expected_directly_and_through_the_gateway(tmp_path):
    run_dir = tmp_path / "run"
    r = chaos_run("experiments/abnormal-inputs.yaml", run_dir, *TINY, "--var", "FAULT_AT=6s", timeout=400)
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    rep = report(run_dir)
    (batch,) = rep["inputs"]
    assert set(batch["destinations"]) == {"r0", "r1", "gateway"}
    assert batch["cases"] > 500  # the generated cases (BLNS in both endpoints, ...) and the malformed requests
    for where, d in batch["destinations"].items():
        assert d["sent"] == batch["cases"] and d["failed"] == 0 and d["not_sent"] == 0, where
        assert set(d["families"]) == {"blns", "special", "special-mix", "repeat", "context", "empty", "injection",
                                      "hostile"}
        rows = {x["case"]: x for x in d["results"]}
        assert len(rows) == batch["cases"]
        over = rows["context/over"]
        assert (over["expected"], over["observed"], over["observed_code"], over["pass"]) == \
            ([400], 400, "context_length_exceeded", True), where
    gw_rows = batch["destinations"]["gateway"]["results"]
    # answered by a replica in one attempt (x-gateway-attempts), or at the gateway's own edge (no header)
    assert all(x["attempts"] in (None, 1) for x in gw_rows)
    assert sum(x["attempts"] == 1 for x in gw_rows) > 400
    names = [c["name"] for c in rep["checks"]]
    assert any("answered as expected by gateway" in n for n in names)
    assert any("gateway passed client errors through" in n for n in names)
    md = (run_dir / "report.md").read_text()
    assert "## Abnormal inputs: abnormal-batch" in md and "| blns |" in md
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []


def test_a_replica_wedged_by_one_class_of_input_fails_the_run_naming_the_case_and_the_restart(tmp_path):
    run_dir = tmp_path / "run"
    r = chaos_run("experiments/wedged-replica.yaml", run_dir, *TINY, "--var", "FAULT_AT=6s", "--var",
                  "LOAD_FOR=40s", timeout=400)
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    rep = report(run_dir)
    failed = {c["name"]: c for c in rep["checks"] if c["passed"] is False}
    answered = failed["abnormal inputs (special-characters): answered as expected by r1"]
    assert "stopped answering after special/nul-inside/completions" in answered["measured"]
    serving = failed["abnormal inputs (special-characters): normal requests served after the batch, without a "
                     "restart"]
    assert "r1 needed a restart (stopped after special/nul-inside/completions)" in serving["measured"]
    assert "it needed a restart: after one it served again" in serving["detail"]
    assert "needed a restart" in r.stdout and "special/nul-inside/completions" in r.stdout
    # r0 had no hook: every case answered as expected there
    passed = {c["name"] for c in rep["checks"] if c["passed"] is True}
    assert "abnormal inputs (special-characters): answered as expected by r0" in passed
    (batch,) = rep["inputs"]
    assert batch["restarted"] == {"r1": {"served": True, "after_s": batch["restarted"]["r1"]["after_s"],
                                         "detail": ""}}
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["event"] == "process_started" and e.get("restart") for e in journal)
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []
