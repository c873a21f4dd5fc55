"""The run cut into phases, each figure with its interval and its samples."""

import numpy as np

from chaos.records import RequestRecord
from chaos.verify.phases import cut, figures
from chaos.verify.recovery import FaultWindow

T0 = 1_000_000.0


def rec(i, t, dur, outcome="ok"):
    return RequestRecord(id=f"q{i}", case="chat", endpoint="chat", stream=True, t_sched=t, t_start=t,
                         t_first=t + dur / 5, t_end=t + dur, status=200, outcome=outcome, itl_us=[10_000, 20_000])


def test_cut_steady_faults_after():
    ws = [FaultWindow("kill", "kill_instance", T0 + 20, T0 + 25), FaultWindow("stall", "stream_stall", T0 + 30)]
    ph = cut(ws, T0, T0 + 60, steady_window=10, recovered_at=T0 + 33)
    assert [(p.name, p.kind, p.start - T0, p.end - T0) for p in ph] == [
        ("steady state", "steady", 10, 20), ("kill", "fault", 20, 25), ("stall", "fault", 30, 60)]
    assert [p.kind for p in cut([], T0, T0 + 60, 10, None)] == ["run"]
    ph = cut(ws[:1], T0, T0 + 60, 10, T0 + 27)
    assert (ph[-1].name, ph[-1].start - T0) == ("after recovery", 27)


def test_figures_carry_intervals_that_cover_the_truth():
    rng = np.random.default_rng(3)
    durs = rng.lognormal(np.log(0.4), 0.3, 2000)
    recs = [rec(i, T0 + i * 0.01, d) for i, d in enumerate(durs)]
    f = figures(recs, cut([], T0, T0 + 40, 10, None)[0])
    p95 = f["e2e"]["p95"]
    truth = float(np.exp(np.log(0.4) + 0.3 * 1.6448536))
    assert p95["low"] <= truth <= p95["high"] and p95["n"] == 2000 and p95["method"] == "order-statistic"
    assert f["itl"]["p50"]["n"] == 4000 and 0.01 <= f["itl"]["p50"]["value"] <= 0.02
    assert f["error_rate"]["value"] == 0 and f["error_rate"]["high"] > 0  # Wilson: zero failures, not zero risk
    assert f["throughput"]["low"] < f["throughput"]["value"] < f["throughput"]["high"]


def test_a_request_belongs_to_the_phase_it_ended_in():
    recs = [rec(1, T0 + 19.9, 0.05), rec(2, T0 + 19.9, 0.3, "stream_error")]  # the second ended after the fault
    steady, fault = cut([FaultWindow("kill", "kill_instance", T0 + 20, T0 + 25)], T0, T0 + 30, 10, None)[:2]
    assert figures(recs, steady)["requests"] == 1 and figures(recs, fault)["failed"] == 1


def test_too_few_for_a_p99_says_how_many_it_needs():
    recs = [rec(i, T0 + i, 0.3) for i in range(30)]
    p99 = figures(recs, cut([], T0, T0 + 40, 10, None)[0])["e2e"]["p99"]
    assert p99["low"] is None and p99["needs"] >= 300
