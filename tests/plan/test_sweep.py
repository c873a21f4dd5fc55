"""`chaos sweep` end to end: the bundled target file (two tiny replicas behind the gateway) started, swept at two
concurrencies, stopped; the table, the files, and figures that agree with the load's own summary."""

import json
import subprocess
import sys

import pytest

from chaos.cli import main
from chaos.records import read_records

SEND = ["--workload", "rag", "--input-tokens", "300", "--output-tokens", "16", "--timeout", "20s"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    p = subprocess.run([sys.executable, "-m", "chaos", "sweep", "targets/reference.yaml", "--var", "PRESET=tiny",
                        "--concurrency", "1,4", "--hold", "1s", *SEND, "--out", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert (out / "sweep.json").exists(), p.stdout[-3000:] + p.stderr[-3000:]
    return p, out, json.loads((out / "sweep.json").read_text())


@pytest.mark.slow
def test_one_row_a_step_with_intervals_and_n(swept):
    p, out, rep = swept
    assert p.returncode == 0, p.stderr[-2000:]
    assert [row["step"] for row in rep["levels"]] == ["users=1", "users=4"]
    assert rep["replicas"] == 2 and rep["name"] == "reference-2x-gateway" and rep["hold_s"] == 1
    for row in rep["levels"]:
        assert row["ok"] > 0
        for metric in ("ttft", "e2e"):
            for q in ("p50", "p95", "p99"):
                e = row[metric][q]
                assert e["n"] == row["ok"] and e["value"] > 0
                if e["low"] is not None:
                    assert e["low"] <= e["value"] <= e["high"]
                else:  # too few requests for this interval: the figure says how many it needs
                    assert e["needs"] > e["n"]
        err = row["error_rate"]
        assert err["n"] == row["requests"] - row["cancelled"] and err["high"] is not None
        assert row["rps"]["low"] <= row["rps"]["value"] <= row["rps"]["high"]
        assert row["rps"]["value"] == pytest.approx(row["ok"] / rep["hold_s"])
        assert row["output_tps"] == pytest.approx(row["output_tokens"] / rep["hold_s"])
        assert row["output_tokens"] == 16 * row["ok"]  # the output limit, exactly (byte-level tokenizer)
        assert row["jitter"]["value"] == pytest.approx(row["e2e"]["p99"]["value"] / row["e2e"]["p50"]["value"])
    # the terminal's table: a line a step
    lines = p.stdout.splitlines()
    assert any(line.startswith("users=1 ") for line in lines) and any(line.startswith("users=4 ") for line in lines)
    assert "TTFT P95" in p.stdout and "P99/P50" in p.stdout


@pytest.mark.slow
def test_figures_agree_with_the_records_and_the_loads_summary(swept):
    _, out, rep = swept
    records = read_records(str(out / "requests.jsonl"))
    summary = json.loads((out / "summary.json").read_text())  # chaos.load's own per-step summary
    for row, step in zip(rep["levels"], summary["steps"]):
        mine = [r for r in records if r.step == row["step"]]
        assert row["requests"] == len(mine) == step["requests"]
        assert row["e2e"]["p50"]["value"] == pytest.approx(step["e2e"]["p50"])
        assert row["ttft"]["p95"]["value"] == pytest.approx(step["ttft"]["p95"])
        assert row["error_rate"]["value"] == pytest.approx(step["error_rate"])
    assert len(records) == sum(row["requests"] for row in rep["levels"])


@pytest.mark.slow
def test_the_markdown_and_the_offline_page(swept):
    _, out, rep = swept
    md = (out / "sweep.md").read_text()
    assert md.startswith("# Sweep: reference-2x-gateway") and "| users=4 |" in md and "E2E P95" in md
    page = (out / "sweep.html").read_text()
    assert '<meta name="chaos-figures" content="1">' in page
    assert '"error_y"' in page and "Latency against load" in page
    assert page.count('"x":[1,4]') == 6  # P50/P95/P99 of TTFT and of E2E, against the two concurrencies


def test_bad_steps_and_targets_are_refused(tmp_path, capsys):
    assert main(["sweep", "http://127.0.0.1:9", "--concurrency", "50,10", "--out", str(tmp_path / "a")]) == 2
    assert "increasing order" in capsys.readouterr().err
    assert main(["sweep", "http://127.0.0.1:9", "--concurrency", "1.5", "--out", str(tmp_path / "a")]) == 2
    assert "whole numbers of users" in capsys.readouterr().err
    assert main(["sweep", "http://127.0.0.1:9", "--var", "PRESET", "--out", str(tmp_path / "a")]) == 2
    assert "write NAME=VALUE" in capsys.readouterr().err
    assert main(["sweep", "http://127.0.0.1:9", "--workload", "nope", "--out", str(tmp_path / "a")]) == 2
    assert "unknown workload" in capsys.readouterr().err
