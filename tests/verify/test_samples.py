"""What the gate and `chaos report --compare` draw from records: latencies with their windows, and error counts."""

import numpy as np

from chaos.records import RequestRecord
from chaos.verify.samples import BLOCK_S, errors, is_open_loop, latency, windowed


def rec(t_sched, t_start, t_first=None, t_end=None, outcome="ok"):
    return RequestRecord(id="x", case="chat", endpoint="chat", stream=True, t_sched=t_sched, t_start=t_start,
                         t_first=t_first, t_end=t_end, outcome=outcome)


def test_open_loop_latency_counts_from_when_the_request_was_due():
    r = rec(10.0, 10.3, t_first=10.5, t_end=11.0)
    assert abs(latency("E2E")(r) - 0.7) < 1e-9 and abs(latency("TTFT")(r) - 0.2) < 1e-9
    assert abs(latency("E2E", open_loop=True)(r) - 1.0) < 1e-9
    assert abs(latency("TTFT", open_loop=True)(r) - 0.5) < 1e-9
    assert latency("TTFT")(rec(0, 0)) is None
    assert is_open_loop({"steps": [{"open_loop": True}]}) and not is_open_loop({"steps": [{}]}) and not is_open_loop({})


def test_windows_are_per_run_and_only_ok_requests_count():
    a = [rec(0, 100.0, t_end=100.2), rec(0, 100.0 + BLOCK_S, t_end=101.0),
         rec(0, 100.1, t_end=100.5, outcome="http_error")]
    b = [rec(0, 500.0, t_end=500.1)]
    vals, wins, runs = windowed([(0, a), (1, b)], latency("E2E"))
    assert np.allclose(vals, [0.2, 0.5, 0.1])
    assert list(runs) == [0, 0, 1]
    assert wins[0] != wins[1] and wins[2] not in (wins[0], wins[1])  # windows of different runs never meet
    assert windowed([(0, [])], latency("E2E"))[0].size == 0


def test_errors_leave_out_what_the_loads_own_stop_cancelled():
    rs = [rec(0, 0, t_end=1), rec(0, 0, outcome="http_error"), rec(0, 0, outcome="timeout"),
          rec(0, 0, outcome="cancelled")]
    assert errors(rs) == (2, 3)
