"""Input faults in whole runs: the shipped abnormal-inputs experiment passes against the reference target with every
case judged per destination, and wedged-replica (a replica the reference server's wedge_on hook wedges on a NUL
byte) fails, naming the case and that the replica needed a restart: the check is proven able to fail."""

import json
import re

import pytest

from .test_runs import Run, run_once, skip_if_not_judged

pytestmark = pytest.mark.slow  # two whole runs, each asserted on by several tests

TINY = ["--var", "PRESET=tiny"]
SPECIAL = "abnormal inputs (special-characters)"
# the NUL case, alone or after the one case in flight beside it (two workers: which of them wedged r1 is not known)
NUL_STOP = r"stopped answering after (special/[\w-]+/\w+ or )?special/nul-inside/completions"


@pytest.fixture(scope="module")
def abnormal(tmp_path_factory) -> Run:
    # The batch takes 22-25 s on a quiet 2-core box (2026-12-05, measured alike on this code and on eb6de26's), sent
    # at 4 s of a 30 s load; on a busier box it can end too late for the checks after it, and the run then says
    # "not judged" (a skip, as in one fresh-clone run of the suite that day), never a false verdict.
    run = run_once(tmp_path_factory, "abnormal-inputs", "experiments/abnormal-inputs.yaml", *TINY, "--var",
                   "FAULT_AT=4s", "--var", "LOAD_FOR=30s", timeout=400)
    skip_if_not_judged(run.r, run.dir)
    assert run.r.returncode == 0, run.r.stdout[-4000:] + run.r.stderr[-2000:]
    return run


def test_abnormal_inputs_every_case_answered_as_expected_directly_and_through_the_gateway(abnormal):
    (batch,) = abnormal.report()["inputs"]
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


def test_abnormal_inputs_through_the_gateway_are_answered_in_one_attempt_or_at_its_edge(abnormal):
    (batch,) = abnormal.report()["inputs"]
    gw_rows = batch["destinations"]["gateway"]["results"]
    # answered by a replica in one attempt (x-gateway-attempts), or at the gateway's own edge (no header)
    assert all(x["attempts"] in (None, 1) for x in gw_rows)
    assert sum(x["attempts"] == 1 for x in gw_rows) > 400


def test_abnormal_inputs_checks_and_report_section(abnormal):
    names = [c["name"] for c in abnormal.report()["checks"]]
    assert any("answered as expected by gateway" in n for n in names)
    assert any("gateway passed client errors through" in n for n in names)
    md = (abnormal.dir / "report.md").read_text()
    assert "## Abnormal inputs: abnormal-batch" in md and "| blns |" in md
    assert abnormal.left == [] and abnormal.unreverted == []


@pytest.fixture(scope="module")
def wedged(tmp_path_factory) -> Run:
    # The batch must be over (r1 stopped answering: its case's 3 s timeout and a 3 s probe; r0's cases; then 5 s
    # for r1 to serve again) before the load ends, so that the revert restarts r1: ~10 s after the fault on a quiet
    # 2-core box, r1 restarted ~12 s after it. The restart and the serve after it finish even once the load has
    # ended (the run waits for a restart under way). Nothing asserted here needs load after that: the run fails on
    # the batch's checks whatever the steady re-check and slo_after say, so 10 s of margin, not 14 s.
    run = run_once(tmp_path_factory, "wedged-replica", "experiments/wedged-replica.yaml", *TINY, "--var",
                   "FAULT_AT=4s", "--var", "LOAD_FOR=24s", timeout=400)
    assert run.r.returncode == 1, run.r.stdout[-4000:] + run.r.stderr[-2000:]
    return run


def failed_checks(run: Run) -> dict:
    return {c["name"]: c for c in run.report()["checks"] if c["passed"] is False}


@pytest.fixture
def judged(wedged) -> Run:
    """The wedged run, where it stopped at the NUL case, or where another stop is the box's, skipped: each case has
    3 s (the experiment's timeout), and with other processes taking over a third of this machine an earlier case
    can outlast it; the batch then rightly stops at the first case that did. Not judged here, as the run says.
    A case in flight beside the NUL one (two workers) hangs with it and is named too: "a or b"."""
    answered = failed_checks(wedged)[f"{SPECIAL}: answered as expected by r1"]
    if (not re.search(NUL_STOP, answered["measured"])
            and wedged.r.neighbours > 1 / 3):
        pytest.skip(f"other processes used {wedged.r.neighbours:.0%} of the machine during the run: "
                    f"{answered['measured']}")
    return wedged


def test_a_replica_wedged_by_one_class_of_input_is_named_with_the_case(judged):
    answered = failed_checks(judged)[f"{SPECIAL}: answered as expected by r1"]
    assert re.search(NUL_STOP, answered["measured"]), answered["measured"]


def test_the_wedged_replica_fails_the_run_saying_it_needed_a_restart(judged):
    serving = failed_checks(judged)[f"{SPECIAL}: normal requests served after the batch, without a restart"]
    assert re.search(r"r1 needed a restart \(stopped after (special/[\w-]+/\w+ or )?special/nul-inside/completions",
                     serving["measured"]), serving["measured"]
    assert "it needed a restart: after one it served again" in serving["detail"]
    assert "needed a restart" in judged.r.stdout and "special/nul-inside/completions" in judged.r.stdout


def test_the_wedged_replica_was_restarted_and_r0_answered_every_case(wedged):
    rep = wedged.report()
    # r0 had no hook: every case answered as expected there
    passed = {c["name"] for c in rep["checks"] if c["passed"] is True}
    assert f"{SPECIAL}: answered as expected by r0" in passed
    (batch,) = rep["inputs"]
    assert batch["restarted"] == {"r1": {"served": True, "after_s": batch["restarted"]["r1"]["after_s"],
                                         "detail": ""}}
    journal = [json.loads(line) for line in (wedged.dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["event"] == "process_started" and e.get("restart") for e in journal)
    assert wedged.left == [] and wedged.unreverted == []
