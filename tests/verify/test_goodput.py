"""Goodput on synthetic records whose truth is known by construction: which requests are good, the share, its
Wilson interval, and the phase and report sections that carry it."""

import math

import numpy as np
import pytest

from chaos.records import RequestRecord
from chaos.records.columns import Columns
from chaos.verify import goodput as gp
from chaos.verify.evidence import Settings, analyse
from chaos.verify.goodputspec import NONE_TEXT, GoodputSLO
from chaos.verify.phases import Phase, figures
from chaos.verify.spec import SLO, SpecError

T0 = 1_000.0


def rec(i, ttft=0.5, e2e=2.0, out=21, outcome="ok", sched_lag=0.0):
    """ttft and e2e from the send; TPOT = (e2e - ttft) / (out - 1): 75 ms with the defaults."""
    t = T0 + i * 0.01
    return RequestRecord(id=str(i), case="chat", endpoint="chat", stream=True, t_sched=t - sched_lag, t_start=t,
                         t_first=None if ttft is None else t + ttft, t_end=None if e2e is None else t + e2e,
                         outcome=outcome, output_tokens=out, status=200 if outcome == "ok" else None)


def good_of(records, bounds, open_loop=False):
    c = Columns.from_records(records)
    return gp.good(c, np.ones(len(c), bool), bounds, open_loop).tolist()


def wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_37_good_of_100_is_037_with_its_wilson_interval():
    # 37 meet TTFT <= 1 s; 40 are too slow to the first token; 23 failed, each fast (never good all the same)
    recs = ([rec(i, ttft=0.2) for i in range(37)] + [rec(100 + i, ttft=1.5) for i in range(40)]
            + [rec(200 + i, ttft=0.1, outcome=o) for i, o in enumerate(["http_error", "timeout", "reset"] * 7
                                                                      + ["bad_output", "stream_error"])])
    f = gp.figure(Columns.from_records(recs), np.ones(100, bool), GoodputSLO(ttft=1.0))
    lo, hi = wilson(37, 100)
    assert (f["value"], f["good"], f["n"], f["method"]) == (0.37, 37, 100, "wilson")
    assert f["low"] == pytest.approx(lo, rel=1e-9) and f["high"] == pytest.approx(hi, rel=1e-9)
    assert f["low"] < 0.37 < f["high"]


def test_a_failed_request_is_never_good_however_fast():
    recs = [rec(0, ttft=0.01, e2e=0.02, outcome=o) for o in ("http_error", "timeout", "connect_error", "reset",
                                                               "stream_error", "bad_output")]
    assert good_of(recs, GoodputSLO(ttft=10, tpot=10, e2e=10)) == [False] * 6


def test_each_bound_is_a_per_request_bound_met_at_equality():
    r = rec(0, ttft=0.5, e2e=2.0, out=21)  # TPOT 75 ms
    assert good_of([r], GoodputSLO(ttft=0.5)) == [True]
    assert good_of([r], GoodputSLO(ttft=0.49)) == [False]
    assert good_of([r], GoodputSLO(e2e=2.0)) == [True]
    assert good_of([r], GoodputSLO(e2e=1.99)) == [False]
    assert good_of([r], GoodputSLO(tpot=0.076)) == [True]
    assert good_of([r], GoodputSLO(tpot=0.074)) == [False]
    assert good_of([r], GoodputSLO(ttft=1, tpot=0.1, e2e=1.5)) == [False]  # every bound given must hold


def test_tpot_is_e2e_less_ttft_over_the_tokens_after_the_first():
    # (3.0 - 1.0) / (11 - 1) = 200 ms, though E2E / tokens would be ~273 ms
    assert good_of([rec(0, ttft=1.0, e2e=3.0, out=11)], GoodputSLO(tpot=0.2001)) == [True]
    assert good_of([rec(0, ttft=1.0, e2e=3.0, out=11)], GoodputSLO(tpot=0.1999)) == [False]


def test_one_output_token_or_none_meets_any_tpot_bound():
    # nothing after the first token to time: vLLM's benchmark_serving counts its TPOT as 0
    recs = [rec(0, ttft=1.0, e2e=9.0, out=1), rec(1, ttft=1.0, e2e=9.0, out=0)]
    assert good_of(recs, GoodputSLO(tpot=0.001)) == [True, True]
    assert good_of(recs, GoodputSLO(tpot=0.001, e2e=5.0)) == [False, False]  # E2E still bounds them


def test_a_bound_on_a_time_never_reached_is_not_met():
    assert good_of([rec(0, ttft=None, e2e=1.0)], GoodputSLO(ttft=5)) == [False]
    assert good_of([rec(0, ttft=None, e2e=1.0, out=5)], GoodputSLO(tpot=5)) == [False]
    assert good_of([rec(0, ttft=None, e2e=1.0)], GoodputSLO(e2e=5)) == [True]  # not asked about TTFT


def test_open_loop_counts_ttft_and_e2e_from_when_the_request_was_due():
    r = rec(0, ttft=0.5, e2e=2.0, sched_lag=1.0)  # sent a second late
    assert good_of([r], GoodputSLO(e2e=2.5)) == [True]
    assert good_of([r], GoodputSLO(e2e=2.5), open_loop=True) == [False]
    assert good_of([r], GoodputSLO(tpot=0.08), open_loop=True) == [True]  # TPOT does not depend on the base


def test_no_bounds_no_figure():
    c = Columns.from_records([rec(0)])
    assert gp.figure(c, np.ones(1, bool), GoodputSLO()) is None
    assert gp.figure(c, np.ones(1, bool), None) is None


def test_a_phase_counts_its_own_requests_and_leaves_cancelled_ones_out():
    recs = ([rec(i, ttft=0.1) for i in range(8)] + [rec(10 + i, ttft=3.0) for i in range(2)]
            + [rec(20, outcome="cancelled")])
    f = figures(recs, Phase("whole run", "run", T0, T0 + 100), goodput=GoodputSLO(ttft=1.0))
    assert (f["goodput"]["good"], f["goodput"]["n"], f["goodput"]["value"]) == (8, 10, 0.8)
    assert f["error_rate"]["n"] == f["goodput"]["n"]  # the error rate's denominator
    assert figures(recs, Phase("whole run", "run", T0, T0 + 100))["goodput"] is None


def test_bounds_from_the_file_win_then_the_slos_tail_bounds_then_none():
    slo = SLO(p95_latency=4.0, p99_latency=8.0, ttft_p95=1.0, error_rate=0.01)
    given = GoodputSLO.from_dict({"ttft": "2s", "tpot": "100ms"})
    assert GoodputSLO.choose(given, slo) == GoodputSLO(ttft=2.0, tpot=0.1, source="steady_state.goodput")
    assert GoodputSLO.choose(None, slo) == GoodputSLO(ttft=1.0, e2e=8.0,
                                                      source="steady_state.slo (ttft_p95, p99_latency)")
    assert GoodputSLO.choose(None, SLO(p50_latency=1.0, error_rate=0.01)).is_empty()  # a median bounds no request
    assert GoodputSLO.choose(None, SLO()).text() == NONE_TEXT
    assert given.text() == "TTFT \u2264 2.00 s, TPOT \u2264 100 ms (from steady_state.goodput)"


@pytest.mark.parametrize("d, where", [({}, ()), ({"ttft": "2s", "itl": "1s"}, ("itl",)), ({"e2e": "soon"}, ("e2e",)),
                                      ({"tpot": 0}, ("tpot",)), ("2s", ())])
def test_a_bad_goodput_mapping_names_its_key(d, where):
    with pytest.raises(SpecError) as e:
        GoodputSLO.from_dict(d)
    assert e.value.problems[0][0] == where


def test_the_bounds_travel_in_the_analysis_settings_and_old_reports_read_them_from_the_slo():
    s = Settings(slo=SLO(p95_latency=3.0), goodput=GoodputSLO(e2e=1.0, source="steady_state.goodput"))
    assert Settings.from_dict(s.to_dict()).goodput == s.goodput
    old = {k: v for k, v in s.to_dict().items() if k != "goodput"}  # written before goodput existed
    assert Settings.from_dict(old).goodput == GoodputSLO(e2e=3.0, source="steady_state.slo (p95_latency)")


def test_analyse_puts_goodput_in_every_phase_and_its_bounds_in_the_analysis():
    recs = [rec(i, e2e=0.5 if i % 4 else 5.0) for i in range(40)]
    out = analyse(recs, [], Settings(slo=SLO(p99_latency=1.0), steady_window=None, load_end=T0 + 60), [])
    assert out["analysis"]["goodput"] == {"ttft": None, "tpot": None, "e2e": 1.0,
                                          "source": "steady_state.slo (p99_latency)"}
    [ph] = out["phases"]
    assert (ph["goodput"]["good"], ph["goodput"]["n"]) == (30, 40)
