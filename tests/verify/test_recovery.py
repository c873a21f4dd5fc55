"""The four recovery figures on record sets built to pass and to fail by a known margin."""

from chaos.verify.spec import SLO
from chaos.records import RequestRecord
from chaos.verify.recovery import FaultWindow, Timeline, budget, detect, failover, fault_windows, recovery, restore

T0 = 1_000_000.0


def rec(i, start, dur, outcome="ok", served="r0"):
    return RequestRecord(id=f"q{i:05d}", case="chat", endpoint="chat", stream=True, t_sched=start, t_start=start,
                         t_first=start + dur / 4, t_end=start + dur, status=200 if outcome == "ok" else 503,
                         outcome=outcome, served_by=served)


def steady(t_from, t_to, every=0.05, dur=0.2, served=("r0", "r1")):
    out, t, i = [], t_from, 0
    while t < t_to:
        out.append(rec(int(t * 1000) % 10**8, t, dur, served=served[i % len(served)]))
        t, i = t + every, i + 1
    return out


JOURNAL = [
    {"t": T0 + 10, "event": "fault_applying", "fault": "kill", "type": "kill_instance",
     "plan": {"instances": [{"id": "r1"}]}},
    {"t": T0 + 10.01, "event": "fault_applied", "fault": "kill"},
    {"t": T0 + 14, "event": "fault_reverted", "fault": "kill",
     "instances": [{"id": "r0", "up_since": T0}, {"id": "r1", "up_since": T0 + 13.9}]},
]


def kill_run():
    """r0 and r1 serve until the kill at +10 s; three streams on r1 fail 20 ms later; r0 alone serves (a
    little slower) until r1 is back at +13.9 s and first serves again at +14.5 s."""
    recs = steady(T0, T0 + 10)
    recs += [rec(90_000 + k, T0 + 9.9, 0.12 + 0.01 * k, "stream_error", "r1") for k in range(3)]
    recs += steady(T0 + 10.05, T0 + 14.4, served=("r0",), every=0.1)
    recs += steady(T0 + 14.4, T0 + 30)
    return recs


SLO_ = SLO(p95_latency=1.0, error_rate=0.01)


def test_fault_windows_from_the_journal():
    (w,) = fault_windows(JOURNAL)
    assert (w.name, w.start, w.end, w.instances) == ("kill", T0 + 10, T0 + 14, ["r1"])
    assert w.back_at == {"r1": T0 + 13.9}


def test_detect_is_the_first_failure_seen_after_the_fault():
    tl = Timeline(kill_run(), SLO_)
    d = detect(tl, fault_windows(JOURNAL)[0], T0 + 100)
    assert abs(d["value"] - 0.02) < 1e-6  # the first stream ended 9.9 + 0.12 = 10.02
    assert "served by r1" in d["evidence"]


def test_detect_counts_a_slow_request_from_when_it_became_a_breach():
    recs = steady(T0, T0 + 20) + [rec(7, T0 + 11.0, 3.0)]  # over the 1 s bound at +12.0
    d = detect(Timeline(recs, SLO_), FaultWindow("f", "latency", T0 + 10), T0 + 100)
    assert abs(d["value"] - 2.0) < 1e-6 and "over the 1000 ms bound" in d["evidence"]


def test_nothing_detected_is_a_result():
    d = detect(Timeline(steady(T0, T0 + 20), SLO_), FaultWindow("f", "latency", T0 + 10), T0 + 100)
    assert d["value"] is None and "no request failed" in d["evidence"]


def test_failover_is_just_after_the_last_failure_at_record_resolution():
    fo = failover(Timeline(kill_run(), SLO_), T0 + 10, 5.0)
    assert abs(fo["value"] - 0.04) < 1e-6  # the last failed stream ended at 9.9 + 0.14
    assert fo["resolution_s"] <= 0.1


def test_failover_waits_out_a_window_that_breaches_latency():
    recs = steady(T0, T0 + 10) + steady(T0 + 10, T0 + 13, dur=2.5) + steady(T0 + 13, T0 + 40)
    fo = failover(Timeline(recs, SLO_), T0 + 10, 5.0)
    # the slow requests end from 12.5 to 15.5; a window of 5 s (~100 requests) is good once fewer than 5 of
    # them are slow: within the last quarter second of slow ends
    assert 5.0 < fo["value"] < 5.5


def test_never_failed_over_says_why():
    recs = steady(T0, T0 + 10) + [rec(k, T0 + 10 + k * 0.05, 0.1, "http_error") for k in range(200)]
    fo = failover(Timeline(recs, SLO_), T0 + 10, 5.0)
    assert fo["value"] is None and "never met the SLO again" in fo["evidence"]


def test_restore_needs_the_instance_back_and_the_throughput():
    tl = Timeline(kill_run(), SLO_)
    w = fault_windows(JOURNAL)[0]
    from chaos.verify.recovery import steady_rate

    base = steady_rate(tl, T0, T0 + 10)
    r = restore(tl, w, base, 5.0)
    # r1 first served a request sent at 14.4 (or later) that ended 0.2 s after
    assert r["value"] is not None and r["value"] >= 4.6 - 1e-6
    assert "r1 served again" in r["evidence"]
    never = restore(Timeline([x for x in kill_run() if x.served_by != "r1" or x.t_start < T0 + 10], SLO_), w,
                    base, 5.0)
    assert never["value"] is None and "r1 never served again" in never["evidence"]


def test_a_gateway_is_restored_by_any_answer_after_it_is_back():
    """No answer names the gateway as who served it (the replicas do): a killed gateway serves again with the
    first ok answer sent after its restart, and never before it."""
    journal = [{**e, "plan": {"instances": [{"id": "gw", "front": True}]}} if e["event"] == "fault_applying"
               else {**e, "instances": [{"id": "gw", "up_since": T0 + 11.5}]} if e["event"] == "fault_reverted"
               else e for e in JOURNAL]
    w = fault_windows(journal)[0]
    assert w.fronts == {"gw"} and w.back_at == {"gw": T0 + 11.5}
    recs = steady(T0, T0 + 10) + steady(T0 + 11.6, T0 + 30)  # nothing answered while the gateway was down
    tl = Timeline(recs, SLO_)
    from chaos.verify.recovery import steady_rate

    r = restore(tl, w, steady_rate(tl, T0, T0 + 10), 5.0)
    assert r["value"] is not None and abs(r["value"] - 1.8) < 1e-6, r  # sent at +11.6, ended 0.2 s later
    assert "gw (the gateway: every answer passes it) served again 1.800 s" in r["evidence"]
    early = restore(Timeline(steady(T0, T0 + 11), SLO_), w, None, 5.0)  # answers before it was back: not it
    assert early["value"] is None and "gw never served again" in early["evidence"]


def test_a_flood_of_fast_failures_still_gets_its_failover_to_within_a_stated_step(monkeypatch):
    """A gateway refusing connections while it restarts fails thousands of requests a second: more than the
    windows tried (here the cap made 500 for speed). The failover is found (it was "never"), and its
    resolution says how finely."""
    import chaos.verify.recovery as R

    monkeypatch.setattr(R, "MAX_CANDIDATES", 500)
    flood = [rec(200_000 + k, T0 + 10 + k * 0.003, 0.0001, "connect_error", None) for k in range(3_300)]
    tl = Timeline(steady(T0, T0 + 10) + flood + steady(T0 + 20, T0 + 40), SLO_)
    fo = failover(tl, T0 + 10, 5.0)
    step = 9.9 / 500
    assert fo["value"] is not None and abs(fo["value"] - 9.9) <= 2 * step + 0.01, fo
    assert fo["resolution_s"] >= step * 0.99
    times, width = R.thinned(tl.end[:100], 1000)
    assert width == 0.0 and len(times) == 100  # under the cap: every one tried


def test_budget_counts_failures_and_their_seconds():
    tl = Timeline(kill_run(), SLO_)
    b = budget(tl, T0 + 10, T0 + 10.05)
    assert b["failed_requests"] == 3 and abs(b["failed_request_seconds"] - (0.12 + 0.13 + 0.14)) < 1e-6


def test_recovery_per_fault_and_for_the_run():
    out = recovery(kill_run(), JOURNAL, SLO_, (T0, T0 + 10), 5.0)
    (f,) = out["faults"]
    assert f["error_budget"]["failed_requests"] == 3
    assert out["run"]["time_to_failover"]["value"] == f["time_to_failover"]["value"]
    assert out["baseline_throughput"]["low"] < 20 < out["baseline_throughput"]["high"]  # one every 50 ms
