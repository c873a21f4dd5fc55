"""The build changes (chaos/reference/builds.py) on real replicas: each changes what the server does as designed,
seeded. Margins are wide: a busy 2-core box makes a tiny model's step 1-20 ms; the changes are hundreds."""

import json
import statistics
import subprocess
import sys
import time

import pytest
from scipy.stats import binomtest

from chaos.reference.builds import BuildChanges
from chaos.reference.launcher import start_server

from .http_util import conn, post

M = "chaos-reference"


def completion(prompt: str, tokens: int) -> dict:
    return {"model": M, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "temperature": 0}


def stream_gaps(base_url: str, tokens: int) -> list[float]:
    """Seconds between the data lines of one streamed completion, as the client read them."""
    c = conn(base_url)
    c.request("POST", "/v1/completions", body=json.dumps({**completion("stall", tokens), "stream": True}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    stamps = []
    while line := r.readline():
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            stamps.append(time.monotonic())
    c.close()
    return [b - a for a, b in zip(stamps, stamps[1:])]


@pytest.mark.parametrize("kw", [{"stall_fraction": 1.5, "stall_ms": 10}, {"stall_fraction": 0.1},
                                {"stall_ms": -1}, {"pace_spread": 3}, {"error_fraction": -0.1}])
def test_out_of_range_changes_are_refused(kw):
    with pytest.raises(ValueError):
        BuildChanges(**kw)


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_a_bad_flag_exits_2_before_the_model_loads():
    r = subprocess.run([sys.executable, "-m", "chaos", "reference", "serve", "--port", "0", "--stall-fraction", "0.1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "stall" in r.stderr
    helped = subprocess.run([sys.executable, "-m", "chaos", "reference", "serve", "--help"], capture_output=True,
                            text=True, timeout=60).stdout
    for flag in ("--stall-fraction", "--stall-ms", "--pace-spread", "--error-fraction", "--build-seed"):
        assert flag in helped


def test_the_error_draw_fails_its_share_of_prompts_the_same_each_time():
    b = BuildChanges(error_fraction=0.005, seed=3)
    prompts = [[7, i, i * 31 % 257] for i in range(20000)]
    failed = [p for p in prompts if b.fails(p)]
    ci = binomtest(len(failed), len(prompts)).proportion_ci(0.999)
    assert ci.low <= 0.005 <= ci.high, len(failed)
    assert failed == [p for p in prompts if BuildChanges(error_fraction=0.005, seed=3).fails(p)]  # seeded
    assert failed != [p for p in prompts if BuildChanges(error_fraction=0.005, seed=4).fails(p)]
    assert not any(BuildChanges().fails(p) for p in prompts[:1000])


def test_the_draws_are_seeded_and_the_pace_median_is_one():
    s1, s2 = BuildChanges(stall_fraction=0.03, stall_ms=300, seed=1), BuildChanges(stall_fraction=0.03, stall_ms=300,
                                                                                   seed=1)
    a, b = s1.stall_draw(), s2.stall_draw()
    draws = [a.next() for _ in range(20000)]
    assert draws == [b.next() for _ in range(20000)] and set(draws) == {0.0, 0.3}
    ci = binomtest(draws.count(0.3), len(draws)).proportion_ci(0.999)
    assert ci.low <= 0.03 <= ci.high
    pace = BuildChanges(pace_spread=0.5, seed=1).pace_draw()
    factors = [pace.next() for _ in range(20000)]
    ci = binomtest(sum(f == 1.0 for f in factors), len(factors)).proportion_ci(0.999)
    assert ci.low <= 0.5 <= ci.high and min(factors) == 1.0  # half unchanged: nothing is made faster
    assert statistics.quantiles(factors, n=4)[2] == pytest.approx(2.718281828 ** (0.5 * 0.6745), rel=0.05)


@pytest.mark.slow  # a real server each: the whole suite's, not the unit tier's
def test_stalls_hold_a_few_steps_and_leave_the_median_step_alone():
    with start_server(["--preset", "tiny", "--stall-fraction", "0.05", "--stall-ms", "250", "--build-seed", "1"]) as s:
        gaps = stream_gaps(s.base_url, 300)
    stalled = sum(g >= 0.2 for g in gaps)
    # 5 % of ~300 steps: ~15 expected; the bounds are the binomial's 99.9 % range, widened
    assert 3 <= stalled <= 35, (stalled, len(gaps))
    assert statistics.median(gaps) < 0.1, statistics.median(gaps)


@pytest.mark.slow  # a real server each: the whole suite's, not the unit tier's
def test_pace_spread_stretches_the_requests_its_seeded_draw_says_and_leaves_the_rest():
    # One request at a time, so the i-th request gets the seed's i-th factor: those drawn >= 2.5 must take far
    # longer than those drawn exactly 1 (half of them), whatever the host does to single requests meanwhile.
    draw = BuildChanges(pace_spread=1.0, seed=2).pace_draw()
    factors = [draw.next() for _ in range(24)]
    with start_server(["--preset", "tiny", "--pace-spread", "1.0", "--build-seed", "2"]) as s:
        times = []
        for i in range(24):
            t0 = time.monotonic()
            status, _, body = post(s.base_url, "/v1/completions", completion(f"pace {i}", 60))
            assert status == 200, body
            times.append(time.monotonic() - t0)
    same = [t for f, t in zip(factors, times) if f == 1.0]
    stretched = [t for f, t in zip(factors, times) if f >= 2.5]
    assert len(same) >= 6 and len(stretched) >= 2, factors
    assert statistics.median(stretched) > 2 * statistics.median(same), (factors, times)


@pytest.mark.slow  # a real server each: the whole suite's, not the unit tier's
def test_rare_errors_are_openai_shaped_500s_on_the_same_prompts_every_time():
    with start_server(["--preset", "tiny", "--error-fraction", "0.2", "--build-seed", "5"]) as s:
        first = [post(s.base_url, "/v1/completions", completion(f"prompt {i}", 2)) for i in range(60)]
        again = [post(s.base_url, "/v1/completions", completion(f"prompt {i}", 2))[0] for i in range(60)]
    statuses = [st for st, _, _ in first]
    assert statuses == again and set(statuses) == {200, 500}
    ci = binomtest(statuses.count(500), len(statuses)).proportion_ci(0.999)
    assert ci.low <= 0.2 <= ci.high, statuses.count(500)
    body = next(b for st, _, b in first if st == 500)
    assert body["error"]["type"] == "server_error" and body["error"]["code"] == "build_error"
    assert "--error-fraction" in body["error"]["message"]
