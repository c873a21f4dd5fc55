"""Goodput on the real three-fault run (tests/conftest.py, shared: no run of its own): its bounds are the
steady-state SLO's (p95_latency 5s, the file giving no goodput:), and each phase's figure is what the records
say, counted here independently; report.md and report.html show it with the bounds."""

import pytest

from chaos.records import ERROR_OUTCOMES, read_records
from chaos.verify.phases import ended_in
from chaos.verify.stats import proportion

pytestmark = pytest.mark.slow


def test_each_phases_goodput_is_the_share_of_its_requests_within_the_slos_bound(three_faults_run):
    report, out = three_faults_run.report, three_faults_run.out
    assert report["analysis"]["goodput"] == {"ttft": None, "tpot": None, "e2e": 5.0,
                                             "source": "steady_state.slo (p95_latency)"}
    records = read_records(str(out / "requests.jsonl"))
    phases = report["phases"]
    assert [p["kind"] for p in phases][:2] == ["steady", "fault"] and len(phases) >= 4
    for p in phases:
        mine = [r for r in ended_in(records, p["start"], p["end"]) if r.outcome != "cancelled"]
        good = sum(r.outcome not in ERROR_OUTCOMES and r.t_end - r.t_start <= 5.0 for r in mine)
        g = p["goodput"]
        assert (g["good"], g["n"]) == (good, len(mine)), p["name"]
        assert g == {**proportion(good, len(mine)).to_dict(), "good": good}
        failed = sum(r.outcome in ERROR_OUTCOMES for r in mine)
        assert g["value"] <= 1 - failed / len(mine) + 1e-12  # a failed request is never good
    assert phases[0]["goodput"]["value"] > 0.9  # the steady state met its SLO (the run was judged on it)


def test_the_markdown_and_the_page_show_goodput_with_its_bounds(three_faults_run):
    out = three_faults_run.out
    md = (out / "report.md").read_text()
    assert "Goodput: the share of requests that met E2E \u2264 5.00 s (from steady_state.slo (p95_latency))" in md
    assert "| phase | span | requests | error rate | goodput |" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "goodput (met the SLO)" in page and "E2E \u2264 5.00 s (from steady_state.slo (p95_latency))" in page
