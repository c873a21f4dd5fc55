"""The four recovery figures on one real run with three faults in turn — a replica SIGKILLed and restarted, its
stream stalled by the LLM proxy, the client's link taken down — each figure compared with the journal's
timestamps and with what the records themselves say, computed here independently."""

import json
import subprocess
import sys

import pytest

from chaos.records import ERROR_OUTCOMES, read_records
from chaos.rundir.journal import read_journal

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def run(three_faults_run):
    out = three_faults_run.out
    return (three_faults_run.report, read_records(str(out / "requests.jsonl")),
            read_journal(str(out / "journal.jsonl")), out)


def _applied(journal, name):
    return next(e["t"] for e in journal if e["event"] == "fault_applying" and e.get("fault") == name)


def _reverted(journal, name):
    return next(e for e in journal if e["event"] == "fault_reverted" and e.get("fault") == name)


def _fault(report, name):
    return next(f for f in report["recovery"]["faults"] if f["fault"] == name)


def test_every_fault_has_its_four_figures_from_the_journals_start(run):
    report, _, journal, _ = run
    assert [f["fault"] for f in report["recovery"]["faults"]] == ["kill-r1", "stall-r1", "down"]
    for f in report["recovery"]["faults"]:
        assert abs(f["start"] - _applied(journal, f["fault"])) < 1e-3
        for name in ("time_to_detect", "time_to_failover", "time_to_restore"):
            assert set(f[name]) >= {"value", "at", "evidence"}
            if f[name]["value"] is not None:  # a moment on the records' clock, after the fault began
                assert f[name]["at"] >= f["start"] - 1e-6 and abs(f[name]["at"] - f["start"] - f[name]["value"]) < 1e-3


def _first_failure_after(records, t0, until):
    ends = [r.t_end for r in records if r.outcome in ERROR_OUTCOMES and r.t_end is not None and t0 <= r.t_end < until]
    return min(ends, default=None)


def test_kill_detected_by_the_first_failure_and_restored_when_r1_serves_again(run):
    report, records, journal, _ = run
    f = _fault(report, "kill-r1")
    t0, nxt = _applied(journal, "kill-r1"), _applied(journal, "stall-r1")
    first = _first_failure_after(records, t0, nxt)
    det = f["time_to_detect"]
    if first is not None and det["value"] is not None and "over the" not in det["evidence"]:
        assert abs(det["at"] - first) < 0.1  # the record that saw it, to within 100 ms
    back = _reverted(journal, "kill-r1")
    up = next(i["up_since"] for i in back["instances"] if i["id"] == "r1")
    res = f["time_to_restore"]
    if res["value"] is None:
        assert "never" in res["evidence"]
        return
    served = min(r.t_end for r in records if r.served_by == "r1" and r.outcome == "ok" and r.t_start >= up)
    assert res["at"] >= served - 0.1 and res["at"] >= up  # not before r1 was back and served
    assert "r1 served again" in res["evidence"]


def test_stream_stall_is_seen_and_budgeted(run):
    report, records, journal, _ = run
    f = _fault(report, "stall-r1")
    labelled = [r for r in records if r.fault and r.fault.startswith("stall-r1")]
    assert labelled, "the proxy labelled no request with the stall"
    failed = [r for r in labelled if r.outcome in ERROR_OUTCOMES]
    if failed:
        assert f["time_to_detect"]["value"] is not None
        assert f["time_to_detect"]["at"] <= min(r.t_end for r in failed) + 0.1
        assert f["error_budget"]["failed_requests"] >= 1


def test_link_down_fails_over_once_the_link_is_back(run):
    report, records, journal, _ = run
    f = _fault(report, "down")
    t1 = _reverted(journal, "down")["t"]
    assert f["time_to_detect"]["value"] is not None  # every request failed while it was down
    assert f["error_budget"]["failed_requests"] >= 1
    fo = f["time_to_failover"]
    if fo["value"] is None:
        assert "never met the SLO again" in fo["evidence"]
        return
    width = report["recovery"]["window_s"]
    # what the records say, computed here: the window after the moment meets the SLO (errors <= 1%)...
    # The moment is the end of a failed request, left out of its window; the report rounds it to the microsecond
    # (at = start + value, value to 6 decimals), so that request can end up to ~1 us after `at`: leave it out too
    # (with errors at the 1 % edge it alone decides, as in a run where 3 of 318 failed and it made 4 of 319).
    after = [r for r in records if r.t_end is not None and fo["at"] + 1e-6 < r.t_end <= fo["at"] + width
             and r.outcome != "cancelled"]
    assert after and sum(r.outcome in ERROR_OUTCOMES for r in after) <= 0.01 * len(after)
    # ...and it is the journal's revert, to within 100 ms beyond how densely the records cover it (every request
    # failed until the link was back, so no earlier window could be good; a busy box spaces records further apart)
    ends = sorted(r.t_end for r in records if r.t_end is not None and t1 - 2 <= r.t_end <= t1 + 2)
    spacing = max((b - a for a, b in zip(ends, ends[1:])), default=0.0)
    assert abs(fo["at"] - t1) <= 0.1 + spacing, (fo, t1, spacing)


def test_recovery_time_check_is_measured_at_record_resolution(run):
    report, *_ = run
    check = next(c for c in report["checks"] if c["name"] == "recovery time")
    assert check["measured"] != "500 ms"  # no longer a step of a 0.5 s grid
    assert report["recovery"]["run"]["time_to_detect"]["value"] is not None


def test_phases_and_markdown_show_the_figures(run):
    report, _, _, out = run
    kinds = [p["kind"] for p in report["phases"]]
    assert kinds[0] == "steady" and kinds.count("fault") == 3
    md = (out / "report.md").read_text()
    assert "## Recovery" in md and "## Phases" in md and "kill-r1" in md


def test_report_json_follows_its_published_schema(run):
    import jsonschema

    from chaos.report.schema import REPORT

    report, *_ = run
    jsonschema.validate(report, REPORT)
    assert report["report_version"] == 2


def test_chaos_report_rerenders_every_format_from_the_files(run, tmp_path):
    import shutil

    report, _, _, out = run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("report.md", "report.html", "junit.xml"):
        (copy / name).unlink(missing_ok=True)
    p = subprocess.run([sys.executable, "-m", "chaos", "report", str(copy)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("report.md", "report.html", "junit.xml", "report.json"):
        assert (copy / name).exists(), name
    again = json.loads((copy / "report.json").read_text())
    assert again["checks"] == report["checks"] and again["verdict"] == report["verdict"]
    for a, b in zip(again["recovery"]["faults"], report["recovery"]["faults"]):
        for k in ("time_to_detect", "time_to_failover", "time_to_restore"):
            assert a[k]["value"] == b[k]["value"], k
    # a run killed before it wrote report.json still gets one, from its journal and records
    (copy / "report.json").unlink()
    p = subprocess.run([sys.executable, "-m", "chaos", "report", str(copy)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rebuilt = json.loads((copy / "report.json").read_text())
    assert rebuilt["checks"] == [] and [f["fault"] for f in rebuilt["recovery"]["faults"]] == \
        ["kill-r1", "stall-r1", "down"]
    assert rebuilt["verdict"] == report["verdict"]  # the journal's run_finished says how it ended


def test_chaos_report_says_what_to_do_with_a_wrong_directory(tmp_path):
    p = subprocess.run([sys.executable, "-m", "chaos", "report", str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and "no requests.jsonl here" in p.stderr
