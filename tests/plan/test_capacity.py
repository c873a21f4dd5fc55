"""`chaos capacity` end to end against a real reference replica, and its command-line checks.

The replica admits at most 6 requests (2 running, 4 waiting: --max-num-seqs 2 --max-waiting 4) and refuses the
rest with 429 at once. Up to 6 users it answers nearly everything; at 7 and more, the extra users' instant refusals
make most requests errors, whatever the machine's speed. So with "errors<50%" the knee is near [6, 7] on any box,
and two searches must find intervals that overlap (the issue: the same knee in repeated runs, within its stated
interval)."""

import json
import math
import subprocess
import sys

import pytest

from chaos.cli import main
from chaos.reference.launcher import start_server

SEND = ["--workload", "rag", "--input-tokens", "300", "--output-tokens", "16", "--timeout", "20s"]


def chaos(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "chaos", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def replica():
    with start_server(["--preset", "tiny", "--max-num-seqs", "2", "--max-waiting", "4"]) as srv:
        yield srv.base_url


@pytest.fixture(scope="module")
def two_searches(replica, tmp_path_factory):
    out = []
    for i in range(2):
        d = tmp_path_factory.mktemp(f"capacity{i}")
        # climb 6 -> 8 (ceil 6 x 1.2), then bisect to 7: three probes, each held the shortest hold there is (1 s;
        # a replica that refuses at once decides a level in far fewer requests than that)
        p = chaos("capacity", replica, "--slo", "errors<50%", "--start", 6, "--factor", 1.2, "--hold", "1s",
                  "--max-probes", 6, "--expected", 3, "--for-concurrency", 20, "--price-per-hour", 2, *SEND,
                  "--out", d)
        assert (d / "capacity.json").exists(), p.stdout[-3000:] + p.stderr[-3000:]
        out.append((p, d, json.loads((d / "capacity.json").read_text())))
    return out


@pytest.mark.slow
def test_two_searches_find_overlapping_knees(two_searches):
    knees = [rep["knee"] for _, _, rep in two_searches]
    for k in knees:
        assert k["low"] is not None and k["high"] is not None, knees
        assert k["low"] < k["high"]
    # [low, high] of each run: the same knee, within each run's own interval
    assert max(k["low"] for k in knees) <= min(k["high"] for k in knees), knees
    for p, _, rep in two_searches:
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]  # expected 3 is within the safe capacity
        assert f"knee in [{knees[two_searches.index((p, _, rep))]['low']:g}" in p.stdout


@pytest.mark.slow
def test_each_verdict_follows_from_its_interval(two_searches):
    for _, d, rep in two_searches:
        assert 1 <= len(rep["probes"]) <= 6
        assert any(p["level"] > 3 for p in rep["probes"])  # past the expected load
        assert rep["search"]["expected"] == 3 and rep["slo"] == "errors<50%"
        for lv in rep["levels"]:
            e = lv["clauses"]["errors"]["estimate"]
            # the pooled error rate with its interval, recounted from the level's figures
            assert e["n"] == lv["requests"] - lv["cancelled"]
            assert e["value"] == pytest.approx(lv["failed"] / e["n"])
            want = "meets" if e["high"] < 0.5 else "breaks" if e["low"] >= 0.5 else "unclear"
            assert lv["verdict"] == lv["clauses"]["errors"]["verdict"] == want
            assert lv["probes"] == sum(p["level"] == lv["level"] for p in rep["probes"])
        assert rep["looks"] == 4 and rep["look_confidence"] == pytest.approx(1 - 0.05 / 4) and rep["minutes"] > 0
        for p in rep["probes"]:  # held until decided, at most 4 looks of 1 s; every probe's own records are kept
            assert 1 <= p["looks"] <= 4 and 0 < p["held_s"] <= 4.5, p
            assert p["looks"] == 4 or p["decided"] != "unclear", p  # it ended early only on a decision
            assert (d / "probes").is_dir() and p["requests"] > 0
            with open(f"{p['dir']}/requests.jsonl") as f:
                assert sum(1 for _ in f) == p["requests"]


@pytest.mark.slow
def test_the_cost_sum_and_the_page(two_searches):
    _, d, rep = two_searches[0]
    low = rep["knee"]["low"]
    cost = rep["cost"]
    assert rep["replicas"] == 1 and cost["per_instance"] == low
    assert cost["instances"] == math.ceil(20 / low)
    safe = next(lv for lv in rep["levels"] if lv["level"] == low)
    assert cost["cost_per_1k_requests"]["by_hour"] == pytest.approx(2.0 / (safe["rps"]["value"] * 3600) * 1000)
    page = (d / "capacity.html").read_text()
    assert '<meta name="chaos-figures" content="1">' in page and "knee" in page and "errors&lt;50%" in page
    md = (d / "capacity.md").read_text()
    assert md.startswith("# Capacity:") and f"instances for 20 users: {cost['instances']}" in md


@pytest.mark.slow
def test_a_load_the_target_refuses_outright_is_a_setup_error_not_a_capacity(replica, tmp_path):
    # the case: rag prompts far past the tiny preset's context; every request is a 400
    p = chaos("capacity", replica, "--slo", "p95<500ms,errors<1%", "--hold", "1s", "--max-probes", 3,
              "--workload", "rag", "--input-tokens", 3000, "--output-tokens", 16, "--out", tmp_path / "c")
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "the target refused every one of the" in p.stderr and "at 1 users with a client error (HTTP 400 " \
        "context_length_exceeded" in p.stderr, p.stderr
    assert "there is no capacity to find" in p.stderr and "--workload chat" in p.stderr  # the hint: what to do
    assert "breaks already" not in p.stdout + p.stderr
    assert not (tmp_path / "c" / "capacity.json").exists()
    assert list((tmp_path / "c" / "probes").iterdir())  # the probe's records stay, named in the message


@pytest.mark.parametrize("args, says", [
    (["--slo", "p95<3"], "bad limit '3'"),
    (["--slo", "latency<3s"], "unknown SLO figure"),
    (["--for-rate", "5"], "--for-rate sizes a --rate search"),
    (["--rate", "--for-concurrency", "5"], "--for-concurrency sizes a concurrency search"),
    (["--expected", "5000"], "past the expected load"),
    (["--hold", "0.2s"], "at least 1 s"),
])
def test_bad_options_fail_before_any_load(args, says, tmp_path, capsys):
    # nothing listens at this address: the options must be refused before the target is reached
    assert main(["capacity", "http://127.0.0.1:9", *args, "--out", str(tmp_path / "x")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_absent_target_is_a_clear_error(tmp_path, capsys):
    assert main(["capacity", "http://127.0.0.1:9", "--out", str(tmp_path / "x")]) == 2
    assert "nothing answers at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["capacity", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "y")]) == 2
    assert "neither a URL" in capsys.readouterr().err


def _rec(status, outcome="http_error", code=None, error=None):
    from chaos.records.record import RequestRecord

    return RequestRecord(id="x", case="rag", endpoint="chat", stream=True, t_sched=0.0, t_start=0.0, status=status,
                         outcome=outcome, error_code=code, error=error)


def test_refusal_is_every_request_a_client_error_that_is_not_about_load():
    from chaos.plan.capacity import refusal

    too_long = [_rec(400, code="context_length_exceeded", error="This model's maximum context length is 1024")] * 3
    assert refusal(too_long) == (400, "context_length_exceeded", "This model's maximum context length is 1024")
    assert refusal(too_long + [_rec(None, "cancelled")]) is not None  # cancelled at the end: not sent
    assert refusal(too_long + [_rec(200, "ok")]) is None  # one served: a capacity question after all
    assert refusal([_rec(429)] * 5) is None and refusal([_rec(408)] * 5) is None  # load, not refusal
    assert refusal(too_long + [_rec(503)]) is None and refusal([_rec(None, "timeout")]) is None
    assert refusal([]) is None
