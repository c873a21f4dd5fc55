"""report.html and the comparison page: the binning behind the plots, the page's sections, and (with Chromium)
the page opened for real: no console error, no request beyond the file itself, every plot drawn."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from chaos.records import read_records
from chaos.report import series as S
from chaos.report.comparehtml import comparison_html
from chaos.report.html import _step_axis, render_html, write_html
from chaos.report.writer import write_reports

from . import synthetic
from .cdp import READY, CDPError, find_chromium, inspect_page

def figures(page: str) -> int:
    return int(re.search(r'<meta name="chaos-figures" content="(\d+)">', page).group(1))


def body(page: str) -> str:
    """The page without the inlined plotly.js."""
    return page[page.index("</head>"):]


# ---- binning ------------------------------------------------------------------------------------------------

def test_binned_quantiles_match_numpy_per_bin_and_leave_gaps():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 10, 5000)
    v = rng.lognormal(0, 1, 5000)
    v[::50] = np.nan  # requests without the figure are left out
    bins = S.Bins(np.arange(11.0))
    qs, counts = S.binned_quantiles(bins, x, v)
    keep = ~np.isnan(v)
    for b in range(10):
        inside = v[keep & (x >= b) & (x < b + 1)]
        assert counts[b] == len(inside)
        for q in S.QUANTILES:
            assert qs[q][b] == pytest.approx(np.percentile(inside, q * 100))
    sparse = np.array([0.5] * 30 + [1.5] * 150)  # 30 requests: a P95, no P99; 150: both
    qs, _ = S.binned_quantiles(S.Bins(np.array([0.0, 1.0, 2.0])), sparse, np.arange(180.0))
    assert not np.isnan(qs[0.95][0]) and np.isnan(qs[0.99][0]) and not np.isnan(qs[0.99][1])
    assert [S.min_count(q) for q in S.QUANTILES] == [2, 20, 100]


def test_bins_are_about_a_second_and_never_more_than_600():
    assert S.bin_width(50) == 1 and S.bin_width(600) == 1 and S.bin_width(601) == 2
    for span in (10, 599, 3600, 86_400, 10**6):
        assert span / S.bin_width(span) <= S.MAX_BINS


def test_columns_counts_and_labels():
    recs = synthetic.records()
    cols = S.columns(recs, synthetic.T0)
    assert len(cols) == len(recs)
    bins = S.bins_for(cols)
    by = S.binned_counts(bins, cols.done, cols.outcome, len(cols.classes))
    for name in ("ok", "timeout", "http_error", "reset", "cancelled"):
        assert by[:, cols.classes.index(name)].sum() == sum(r.outcome == name for r in recs)
    labels, counts = S.label_counts(bins, cols)
    assert set(labels) == {"slow-r1; delay", "errors-r1; status 503", "drop-r1; reset"}  # detail dropped
    assert counts.sum() == sum(1 for r in recs if r.fault)
    rate = S.error_rate(bins, cols)
    assert np.nanmax(rate) > 0.1 and np.nanmin(rate) == 0


def test_many_fault_labels_are_capped():
    from chaos.records import RequestRecord

    recs = [RequestRecord(id=str(i), case="c", endpoint="chat", stream=True, t_sched=i / 10, t_start=i / 10,
                          t_end=i / 10 + 1, fault=f"rule{i % 25}; delay") for i in range(500)]
    labels, counts = S.label_counts(S.bins_for(S.columns(recs, 0.0)), S.columns(recs, 0.0))
    assert len(labels) == S.MAX_LABELS and labels[-1].startswith("other faults") and counts.sum() == 500


def test_ecdf_from_samples_and_histograms():
    x, f = S.ecdf(list(range(10_000, 0, -1)), max_points=100)
    assert len(x) == 100 and f[-1] == 1.0 and np.all(np.diff(x) >= 0)
    x, f = S.ecdf({"edges": [0, 1, 2], "counts": [1, 3]})
    assert list(f) == [0.0, 0.25, 1.0]
    assert len(S.ecdf([])[0]) == 0 and len(S.ecdf(None)[0]) == 0


def test_step_axis_from_users_rate_or_names():
    assert _step_axis([{"step": "users=4"}, {"step": "users=16"}]) == ([4.0, 16.0], "concurrent users", False)
    assert _step_axis([{"step": "a", "users": 2}, {"step": "b", "users": 8}])[0] == [2, 8]
    assert _step_axis([{"step": "rate=2/s"}, {"step": "rate=5.5/s"}])[:2] == ([2.0, 5.5], "offered rate (req/s)")
    assert _step_axis([{"step": "ramp 1->9"}, {"step": "x"}]) == (["ramp 1->9", "x"], "step", True)


# ---- the page -----------------------------------------------------------------------------------------------

@pytest.fixture
def synthetic_run(tmp_path):
    d = tmp_path / "run"
    report = synthetic.write_run(str(d))
    return str(d), report


def test_page_has_every_section_in_order(synthetic_run):
    run_dir, report = synthetic_run
    path = write_html(run_dir, report)
    assert path == os.path.join(run_dir, "report.html")
    page = open(path, encoding="utf-8").read()
    assert page.count("plotly.js v") == 1  # inlined once
    assert figures(page) == 5  # latency, throughput, TTFT, steps, server metrics
    b = body(page)
    order = ["<h1>", 'id="checks"', 'id="latency"', 'id="throughput"', 'id="ttft"', 'id="steps"', 'id="phases"',
             'id="recovery"', 'id="stability"', 'id="diagnosis"', 'id="metrics"', 'id="notes"', 'id="faults"',
             'id="timeline"']
    at = [b.index(s) for s in order]
    assert at == sorted(at)
    assert "synthetic &lt;demo&gt;" in b and "a note with &lt;b&gt;markup&lt;/b&gt;" in b  # text, never markup
    assert '<td class="fail">FAIL</td>' in b and '<td class="skip">not judged</td>' in b
    assert "900\u00a0[855\u2013945]\u00a0ms n=300" in b  # an Estimate with its interval
    assert "needs n&gt;=459" in b  # and one without
    assert "never" in b and "the last 5 s window still had 12% errors" in b  # recovery evidence
    assert "NOT reverted" in b and "revert: r0: no such process" in b
    # nothing outside the page: no src/href to anywhere, no stylesheet or font link
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", b)
    assert "Content-Security-Policy" in page and "connect-src 'none'" in page
    assert len(page) < 6_000_000


def test_empty_run_says_so(tmp_path):
    report = {"experiment": {"name": "setup-failed"}, "verdict": "error", "exit_code": 2,
              "reason": "target did not start", "checks": [], "server_metrics": None}
    path = write_html(str(tmp_path), report)  # no requests.jsonl at all
    page = open(path, encoding="utf-8").read()
    assert figures(page) == 0
    assert "No requests were recorded in this run" in page
    assert "no server metrics: the run kept none" in page
    assert "(none ran)" in page
    assert figures(render_html({}, [], None)) == 0  # nothing at all: still a page


def test_one_step_and_no_metrics_are_one_line_each(synthetic_run):
    run_dir, report = synthetic_run
    report["steps"] = report["steps"][:1]
    sm = {"file": "metrics.jsonl", "interval_s": 1.0, "series": {},
          "instances": {"r0": {"scraped": 0, "failed": 5, "available": False, "why": "GET /metrics: 404"}}}
    page = render_html(report, read_records(os.path.join(run_dir, "requests.jsonl")), sm)
    assert figures(page) == 3
    assert "One load step (users=4): nothing to plot against concurrency." in page
    assert "no server metrics: r0: GET /metrics: 404" in page


def test_write_reports_writes_all_four(synthetic_run):
    run_dir, report = synthetic_run
    secret = "sk-live-0123456789abcdef"
    report["notes"].append(f"leaked {secret}")
    paths = write_reports(run_dir, report, [], mask=lambda x: json.loads(json.dumps(x).replace(secret, "***"))
                          if not isinstance(x, str) else x.replace(secret, "***"))
    assert [os.path.basename(p) for p in paths] == ["report.json", "report.md", "junit.xml", "report.html"]
    for p in paths:
        assert secret not in open(p, encoding="utf-8").read(), p
    assert ET.parse(paths[2]).getroot().find("testsuite").get("failures") == "1"


E = synthetic.estimate
COMPARISON = {  # shaped as chaos/report/comparison.py writes it
    "a": {"dir": "reports/a", "name": "kill-instance", "verdict": "passed", "requests": 700,
          "error_rate": E(0.01, 0.005, 0.02, 700, "wilson"), "throughput": E(14.0, 13.0, 15.0, 700, "poisson")},
    "b": {"dir": "reports/b", "name": "kill-instance", "verdict": "failed"}, "confidence": 0.95,
    "figures": [
        {"figure": "whole load E2E distribution", "kind": "distribution", "test": "mann-whitney", "effect": 0.81,
         "p_value": 1e-9, "p_holm": 4e-9, "verdict": "worse", "summary": "P(B > A) = 0.81, p = 1e-09"},
        {"figure": "whole load E2E p95", "kind": "latency", "a": E(0.5, 0.48, 0.52, 300),
         "b": E(0.7, 0.66, 0.74, 300), "difference": E(0.2, 0.15, 0.25, 300, "bootstrap"),
         "ratio": E(1.4, 1.3, 1.5, 300, "bootstrap"), "p_value": 0.0001, "p_holm": 0.0003, "verdict": "worse"},
        {"figure": "whole load error rate", "kind": "proportion", "a": E(0.01, 0.005, 0.02, 300, "wilson"),
         "b": E(0.012, 0.006, 0.024, 300, "wilson"), "difference": E(0.002, -0.01, 0.014, 300, "wilson"),
         "ratio": None, "p_value": 0.8, "verdict": "no detectable change"},
        {"figure": "slow-r1 TTFT p99", "kind": "latency", "a": E(None, n=12, needs=459), "b": E(None, n=9, needs=459),
         "difference": None, "ratio": None, "p_value": None, "verdict": "not judged",
         "why": "too few requests in the phase"}],
    "recovery": [{"fault": "kill-r1", "time_to_detect": {"a": 0.08, "b": 0.3},
                  "time_to_failover": {"a": 1.2, "b": None}, "time_to_restore": {"a": 8.0, "b": 9.5},
                  "failed_requests": {"a": 3, "b": 40}}],
    "latency": {"a": {"e2e": sorted(np.random.default_rng(1).lognormal(-0.7, 0.2, 3000).tolist()),
                      "ttft": {"edges": [0.01, 0.02, 0.05, 0.1], "counts": [5, 80, 15]}},
                "b": {"e2e": np.random.default_rng(2).lognormal(-0.4, 0.3, 3000).tolist()}},
}


def test_comparison_page():
    page = comparison_html(COMPARISON)
    assert figures(page) == 1 and page.count("plotly.js v") == 1
    b = body(page)
    assert "2 worse" in b and "P(B &gt; A) = 0.81" in b and "1e-09 (Holm\u00a04e-09)" in b
    assert "700\u00a0[660\u2013740]\u00a0ms n=300" in b and '<td class="fail nowrap"' in b
    assert "1.20\u00a0[0.60\u20132.40]% n=300" in b and "no detectable change" in b
    assert '<td class="skip nowrap" title="too few requests in the phase">not judged</td>' in b
    assert "80 ms / 300 ms" in b and "1.20 s / never" in b and "3 / 40" in b  # recovery side by side
    assert "errors 1.00\u00a0[0.50\u20132.00]% n=700" in b
    assert figures(comparison_html({"a": {}, "b": {}})) == 0


# ---- in a browser -------------------------------------------------------------------------------------------

def open_page(path: str, screenshot: str | None = None):
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the page is not opened in a browser")
    try:
        return inspect_page(path, READY, screenshot, timeout=90)
    except CDPError as e:
        pytest.fail(f"chromium: {e}")


def assert_clean(r, expected_figures: int | None = None):
    assert r.errors == [], r.errors
    assert r.network_requests() == [], f"the page asked for {r.network_requests()}"
    assert r.requests == [r.url]
    assert r.value, "not every figure was drawn (a .js-plotly-plot with its .main-svg each)"
    if expected_figures is not None:
        assert r.value["plots"] == expected_figures


@pytest.mark.slow
def test_page_opens_offline_in_chromium(synthetic_run, tmp_path):
    run_dir, report = synthetic_run
    path = write_html(run_dir, report)
    shot = str(tmp_path / "report.png")
    r = open_page(path, shot)
    assert_clean(r, 5)
    assert open(shot, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("CHAOS_REPORT_SCREENSHOT"):  # where a person wants to look at it
        shutil.copy(shot, os.environ["CHAOS_REPORT_SCREENSHOT"])


@pytest.mark.slow
def test_empty_and_comparison_pages_open_cleanly(tmp_path):
    empty = tmp_path / "empty.html"
    empty.write_text(render_html({"experiment": {"name": "nothing"}, "verdict": "error"}, [], None))
    r = open_page(str(empty))
    assert r.errors == [] and r.network_requests() == []
    comp = tmp_path / "comparison.html"
    comp.write_text(comparison_html(COMPARISON))
    assert_clean(open_page(str(comp)), 1)


# ---- a real run ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_run(three_faults_run):  # tests/conftest.py: one real run the recovery and metrics tests share
    return three_faults_run.out, three_faults_run.report, three_faults_run.process


@pytest.mark.slow
def test_a_real_run_writes_page_and_junit(real_run):
    out, report, p = real_run
    assert "report.html not written" not in p.stderr, p.stderr[-3000:]
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite.get("name") == "recovery-truth"
    assert int(suite.get("tests")) >= len(report["checks"]) >= 1
    assert int(suite.get("failures")) >= sum(c.get("passed") is False for c in report["checks"])
    page = (out / "report.html").read_text(encoding="utf-8")
    assert figures(page) >= 3  # latency, throughput, TTFT at least
    assert "kill_instance" in body(page)
    assert_clean(open_page(str(out / "report.html")))


@pytest.mark.slow
def test_the_readme_screenshot_script_shoots_a_real_report(real_run, tmp_path):
    """scripts/screenshot.py, as the README's picture is taken: a real run's page, every figure drawn, a PNG."""
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): no screenshot")
    out, _, _ = real_run
    png = tmp_path / "report.png"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, os.path.join(root, "scripts", "screenshot.py"), str(out), "--out", str(png),
                        "--width", "1000", "--height", "700"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk: the page's size, as asked
    assert (width, height) == (1000, 700) and len(data) > 20_000, (width, height, len(data))
    assert f"wrote {os.path.relpath(png)}" in r.stdout


def test_a_p99_at_twelve_requests_a_second_is_drawn_over_a_window_that_holds_a_hundred():
    """1 s bins at ~12 requests a second: binned, every P95 and P99 is a gap; the rolling windows widen until
    each holds what its percentile needs, a P50 stays one bin, and the values are the window's own quantiles."""
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 60, 720))
    v = rng.lognormal(0, 0.5, 720)
    bins = S.Bins(np.arange(0.0, 61.0))
    binned, counts = S.binned_quantiles(bins, x, v)
    assert np.isnan(binned[0.95]).all() and np.isnan(binned[0.99]).all()
    qs, widths, _ = S.rolling_quantiles(bins, x, v)
    assert widths[0.5] == 1.0 and widths[0.95] == 2.0 and widths[0.99] == 9.0
    assert np.isnan(qs[0.99]).mean() < 0.2 and np.isnan(qs[0.95]).mean() < 0.3
    i = 30
    inside = v[(x >= bins.centers[i] - 4.5) & (x < bins.centers[i] + 4.5)]
    assert qs[0.99][i] == pytest.approx(np.quantile(inside, 0.99))
    np.testing.assert_array_equal(qs[0.5], binned[0.5])
