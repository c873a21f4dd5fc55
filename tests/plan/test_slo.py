"""The SLO text and the rule that judges a figure with its interval (chaos.plan.slo), and the SLO figures made
from request records (chaos.plan.figures)."""

import pytest

from chaos.plan.figures import FAILED_S, judge, slo_estimate
from chaos.plan.slo import BREAKS, MEETS, UNCLEAR, SLOError, combine, parse_slo
from chaos.records import RequestRecord


def test_the_seed_slo_parses():
    slo = parse_slo("p95<3s,errors<0.1%")
    (lat, err) = slo.clauses
    assert (lat.metric, lat.q, lat.limit, lat.inclusive) == ("e2e", 95, 3.0, False)
    assert (err.metric, err.limit) == ("errors", pytest.approx(0.001))
    assert slo.text() == "p95<3s,errors<0.1%"


def test_ttft_forms_units_and_inclusive():
    slo = parse_slo(" ttft_p95 <= 500ms , ttft_p99<2s, e2e_p50<1.5s ")
    assert [(c.key, c.limit, c.inclusive) for c in slo.clauses] == [
        ("ttft_p95", 0.5, True), ("ttft_p99", 2.0, False), ("e2e_p50", 1.5, False)]


@pytest.mark.parametrize("text, says", [
    ("", "empty SLO"),
    ("p95", "FIGURE<LIMIT"),
    ("p95>3s", "FIGURE<LIMIT"),
    ("p97<3s", "unknown SLO figure 'p97'"),
    ("p95<3", "bad limit '3'"),
    ("p95<fast", "bad limit 'fast'"),
    ("errors<0.1", "bad limit '0.1'"),
    ("errors<150%", "bad limit"),
    ("errors<100%", "up to (not including) 100%"),
    ("p95<0s", "more than 0 s"),
    ("p95<3s,e2e_p95<2s", "given twice"),
    ("p95<3s,,errors<1%", "cannot read SLO clause ''"),
])
def test_bad_slos_are_refused_with_what_to_write(text, says):
    with pytest.raises(SLOError) as e:
        parse_slo(text)
    assert says in str(e.value)


def test_decision_rule_reads_the_interval_not_the_point():
    c = parse_slo("p95<3s").clauses[0]
    assert c.judge(2.0, 2.9) == MEETS  # the whole interval within the limit
    assert c.judge(3.0, 4.0) == BREAKS  # "<": a lower bound at the limit already breaks it
    assert c.judge(2.5, 3.5) == UNCLEAR  # straddles: the point alone would have said meets
    assert c.judge(2.0, None) == UNCLEAR  # too few samples for an upper bound: cannot say it meets
    assert c.judge(None, None) == UNCLEAR
    inclusive = parse_slo("p95<=3s").clauses[0]
    assert inclusive.judge(2.0, 3.0) == MEETS and inclusive.judge(3.0, 4.0) == UNCLEAR
    assert combine([MEETS, MEETS]) == MEETS
    assert combine([MEETS, UNCLEAR]) == UNCLEAR
    assert combine([UNCLEAR, BREAKS]) == BREAKS


def _records(ok_latencies, failed=0):
    out = [RequestRecord(id=f"r{i}", case="rag", endpoint="chat", stream=True, t_sched=100.0 + i, t_start=100.0 + i,
                         t_first=100.0 + i + v / 2, t_end=100.0 + i + v, outcome="ok")
           for i, v in enumerate(ok_latencies)]
    out += [RequestRecord(id=f"f{i}", case="rag", endpoint="chat", stream=True, t_sched=500.0 + i,
                          t_start=500.0 + i, t_end=500.0 + i + 0.002, status=429, outcome="http_error")
            for i in range(failed)]
    return out


def test_figures_from_records_with_their_intervals():
    recs = _records([0.1 + 0.01 * i for i in range(200)])  # 0.1 .. 2.09 s, no failure
    slo = parse_slo("p95<3s,errors<5%")
    got = judge(recs, slo)
    assert got["verdict"] == MEETS
    p95 = got["clauses"][0]["estimate"]
    assert p95["n"] == 200 and p95["low"] <= p95["value"] <= p95["high"] < 3
    assert got["clauses"][1]["estimate"]["value"] == 0 and got["clauses"][1]["estimate"]["high"] < 0.05
    assert judge(recs, parse_slo("p95<1.5s"))["verdict"] == BREAKS


def test_a_fast_failure_counts_as_slow_for_latency():
    # 20 % of requests refused in 2 ms: their latency must not make the P95 look fast
    recs = _records([0.05] * 160, failed=40)
    e = slo_estimate(recs, parse_slo("p95<3s").clauses[0])
    assert e.low >= FAILED_S / 10
    got = judge(recs, parse_slo("p95<3s"))
    assert got["verdict"] == BREAKS
    assert got["clauses"][0]["estimate"]["value"] is None and got["clauses"][0]["estimate"]["value_failed"]
    # cancelled requests are not judged at all
    recs[0].outcome = "cancelled"
    assert slo_estimate(recs, parse_slo("errors<50%").clauses[0]).n == 199


def test_too_few_requests_is_unclear_not_a_pass():
    recs = _records([0.1] * 20)  # a P95 interval needs 72 requests
    assert judge(recs, parse_slo("p95<3s"))["verdict"] == UNCLEAR
    assert judge([], parse_slo("p95<3s,errors<1%"))["verdict"] == UNCLEAR
