"""experiments/long-context.yaml in its short mode against the real reference target (targets/reference-long.yaml):
sizes interleaved, every prompt counted as the server counts it, the latency-growth check passes and the report
carries the per-size table and the fit."""

import pytest

from .test_runs import Run, run_once, skip_if_not_judged

pytestmark = pytest.mark.slow  # one whole run, asserted on by each test

SIZES = [500, 1000, 2000, 4000]
# ~1 s a round of the four sizes on 2 cores: 12 s give ~10 of each where 5 are needed (20 in a 20 s run here)
SHORT = ["--var", "SIZES=" + ",".join(map(str, SIZES)), "--var", "LOAD_FOR=12s", "--var", "MIN_REQUESTS=5"]


@pytest.fixture(scope="module")
def long_context(tmp_path_factory) -> Run:
    run = run_once(tmp_path_factory, "long-context", "experiments/long-context.yaml", *SHORT, timeout=150)
    skip_if_not_judged(run.r, run.dir)
    return run


@pytest.fixture
def passed(long_context) -> Run:
    assert long_context.r.returncode == 0, long_context.r.stdout[-3000:] + long_context.r.stderr[-3000:]
    return long_context


def test_long_context_short_run_fits_latency_per_size_and_passes(passed):
    rep = passed.report()
    assert rep["verdict"] == "passed"
    check = next(c for c in rep["checks"] if c["name"].startswith("latency growth"))
    assert check["status"] == "passed" and "knee none" in check["measured"], check
    g = check["growth"]
    assert [row["input_tokens"] for row in g["sizes"]] == SIZES
    assert all(row["ok"] == row["sent"] >= 5 for row in g["sizes"]), g["sizes"]
    p50 = [row["ttft_p50_s"] for row in g["sizes"]]
    assert p50 == sorted(p50) and p50[-1] > 2 * p50[0], f"prefill grows with the prompt: {p50}"
    fit = g["fits"]["ttft"]
    assert fit["slope_ms_per_1k_tokens"] > 0 and 0 <= fit["r2"] <= 1, fit
    assert set(g["fits"]) == {"ttft", "e2e"} and g["knee_tokens"] is None
    assert len(g["step_ratios"]) == len(SIZES) - 2
    assert rep["latency_growth"] == g, "report.json also has the table and fit at the top"


def test_long_context_prompts_are_their_size_and_interleaved(passed):
    recs = sorted(passed.records(), key=lambda x: x["t_start"])
    assert all(x["server_input_tokens"] == x["input_tokens"] for x in recs if x["outcome"] == "ok"), \
        "each prompt is exactly its size, as the server counts it"
    # one user: each run of len(SIZES) requests takes every size once, so no size waits for the end of the run
    for i in range(0, len(recs) - len(SIZES) + 1, len(SIZES)):
        assert sorted(x["input_tokens"] for x in recs[i:i + len(SIZES)]) == SIZES


def test_long_context_report_has_the_per_size_table_and_the_fit(passed):
    md = (passed.dir / "report.md").read_text()
    assert "## Latency vs input length" in md
    assert "| input tokens | sent | ok | TTFT P50 | TTFT P95 | E2E P50 | E2E P95 |" in md
    for n in SIZES:
        assert f"| {n} | " in md
    assert "TTFT P50 fit:" in md and "ms per 1k tokens" in md and "knee: none" in md
