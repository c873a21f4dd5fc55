"""Each row of the troubleshooting table fires on evidence built to match it, cites that evidence, and stays
silent on evidence built not to; the advice follows from the measured figures."""

from chaos.records import RequestRecord
from chaos.verify.diagnosis import advice, burst, context, contention, decoding, diagnose, memory, queueing

T0 = 1_000_000.0


def rec(i, t, outcome="ok", status=200, error_code=None, input_tokens=100, dur=0.3):
    return RequestRecord(id=f"q{i}", case="chat", endpoint="chat", stream=True, t_sched=t, t_start=t,
                         t_first=t + 0.05, t_end=t + dur, status=status, outcome=outcome, error_code=error_code,
                         input_tokens=input_tokens)


def step(users, p95, jitter=1.2, error_rate=0.0):
    return {"step": f"users={users}", "e2e": {"p50": p95 / 2, "p95": p95, "p99": p95 * 1.2}, "jitter": jitter,
            "error_rate": error_rate}


def metrics(**series):
    return {"series": {k: {"r0": [[T0 + i, v] for i, v in enumerate(vals)]} for k, vals in series.items()}}


def test_queueing_needs_latency_growing_with_concurrency():
    found = queueing([step(10, 0.5), step(50, 0.9), step(100, 2.4)], metrics(waiting=[0, 3, 41]))
    assert found["cause"] == "batching / queueing limit"
    assert "E2E P95 500 ms at 10 users -> 2400 ms at 100 users (4.8x)" in found["evidence"][0]
    assert "waiting in r0's queue reached 41" in found["evidence"][1]
    assert queueing([step(10, 0.5), step(100, 0.6)], None) is None  # flat: no finding
    assert queueing([step(10, 0.5)], None) is None  # one step cannot show a trend


def test_memory_pressure_from_kv_usage_with_timeouts_or_preemptions():
    timeouts = [rec(i, T0 + i, "timeout", None) for i in range(3)]
    found = memory(timeouts, metrics(kv_usage=[0.5, 0.97]))
    assert found["cause"].startswith("memory pressure") and "KV cache usage reached 97% on r0" in found["evidence"]
    assert memory([], metrics(preemptions_total=[0, 12]))["evidence"] == ["12 preemptions on r0"]
    assert memory(timeouts, metrics(kv_usage=[0.4, 0.5])) is None  # timeouts without a full cache: not this


def test_decoding_from_invalid_json():
    st = {"json_valid": {"rate": {"value": 0.8, "n": 50}}}
    assert "only 80.0% of 50 structured answers were valid JSON" in decoding(st)["evidence"][0]
    assert decoding({"json_valid": {"rate": {"value": 1.0, "n": 50}}}) is None and decoding(None) is None


def test_context_limit_from_refusals_or_long_inputs_failing():
    recs = [rec(i, T0 + i, input_tokens=100 + i) for i in range(40)]
    recs += [rec(100 + i, T0 + i, "http_error", 400, "context_length_exceeded", 9000) for i in range(4)]
    found = context(recs)
    assert found["cause"] == "the context limit" and "4 requests refused" in found["evidence"][0]
    assert "the longest quarter of inputs" in found["evidence"][1]
    assert context([rec(i, T0 + i) for i in range(40)]) is None


def test_an_error_burst_is_5xx_close_together():
    spread = [rec(i, T0 + 30 * i, "http_error", 503) for i in range(8)]
    assert burst(spread) is None  # eight 503s over four minutes: not a burst
    bunched = spread + [rec(100 + i, T0 + 500 + i * 0.2, "http_error", 500) for i in range(12)]
    found = burst(bunched)
    assert found and "12 of 20 5xx answers came within 5 s" in found["evidence"][0]


def test_contention_is_jitter_at_low_load():
    assert "jitter (E2E P99/P50) 4.5 at only 2 users" in contention([step(2, 0.5, jitter=4.5)])["evidence"][0]
    assert contention([step(64, 0.5, jitter=4.5)]) is None  # high load: jitter is expected there


def test_diagnose_lists_only_what_matched():
    assert diagnose([rec(i, T0 + i) for i in range(30)], [step(4, 0.3)], None, None) == []


def test_advice_from_the_steady_state_and_the_steps():
    phases = [{"kind": "steady", "e2e": {"p99": {"value": 0.8, "low": 0.7, "high": 0.95, "n": 400}},
               "error_rate": {"value": 0.001}}]
    a = advice(phases, [step(10, 0.5), step(50, 1.0), step(100, 4.0)], slo_bound=3.0)
    assert a["timeout"]["value"] == 1.2 and a["timeout"]["low"] == 1.05 and a["timeout"]["high"] == 1.425
    assert a["concurrency_cap"]["value"] == 40 and a["concurrency_cap"]["capacity"] == 50
    assert a["retries"]["max_retries"] == 2
    single = advice(phases, [step(10, 0.5)], slo_bound=3.0)
    assert single["concurrency_cap"]["value"] is None and "concurrency gradient" in single["concurrency_cap"]["rule"]
