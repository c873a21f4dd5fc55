"""A load over workers on several hosts (chaos/load/fleet.py): each worker's clock offset from the master's, from
NTP-style exchanges, and the workers whose records stopped."""

import random
from types import SimpleNamespace

import pytest

from chaos.load import fleet


def exchanges(offset: float, out_delays, back_delays, start=1000.0):
    """(t1, t2, t3, t4) as a worker whose clock is `offset` behind the master's sees them."""
    out, t = [], start
    for d_out, d_back in zip(out_delays, back_delays):
        t1 = t
        t2 = t1 + offset + d_out  # read on the master's clock
        t3 = t2
        t4 = t1 + d_out + d_back
        out.append((t1, t2, t3, t4))
        t += 0.01
    return out


def test_the_offset_is_found_within_half_the_shortest_round_trip_whatever_the_path():
    rng = random.Random(3)
    for _ in range(500):
        offset = rng.uniform(-5, 5)
        outs = [rng.expovariate(1 / 0.002) for _ in range(5)]
        backs = [rng.expovariate(1 / 0.002) for _ in range(5)]
        got = fleet.estimate(exchanges(offset, outs, backs))
        assert abs(got["offset"] - offset) <= got["bound"] + 1e-9
        assert got["bound"] == pytest.approx(min(o + b for o, b in zip(outs, backs)) / 2)
        assert got["exchanges"] == 5
    # a symmetric path gives it exactly; the shortest round trip is the one kept
    got = fleet.estimate(exchanges(2.5, [0.010, 0.001, 0.020], [0.010, 0.001, 0.002]))
    assert got["offset"] == pytest.approx(2.5) and got["bound"] == pytest.approx(0.001)
    with pytest.raises(ValueError):
        fleet.estimate([])


def test_a_record_is_moved_onto_the_masters_clock_with_its_intervals_kept():
    rec = SimpleNamespace(t_sched=10.0, t_start=10.5, t_first=10.7, t_end=None)
    fleet.shift(rec, -3.0)
    assert (rec.t_sched, rec.t_start, rec.t_first, rec.t_end) == (7.0, 7.5, pytest.approx(7.7), None)


def test_offsets_are_written_beside_the_records_and_said(tmp_path):
    fleet.write_offset(str(tmp_path), "w1", {"offset": -0.0031, "bound": 0.0002, "exchanges": 5})
    fleet.write_offset(str(tmp_path), "w0", {"offset": 0.0001, "bound": 0.0001, "exchanges": 5})
    got = fleet.read_offsets(str(tmp_path))
    assert set(got) == {"w0", "w1"}
    said = fleet.offsets_note(got, 3)
    assert "w0 +0.10 ms (± 0.10 ms, 5 exchanges); w1 -3.10 ms" in said and "not measured for w2" in said
    assert fleet.offsets_note({}, 0) is None


def rec(worker, t):
    return SimpleNamespace(worker=worker, t_start=t, t_end=t + 0.05)


def test_a_worker_whose_records_stop_is_named_with_its_host():
    records = [rec("w0", t) for t in range(0, 30)] + [rec("w1", t) for t in range(0, 6)]
    said = fleet.silent_workers(records, 2, 0.0, 30.0, {"w1": "load-c"})
    assert len(said) == 1 and said[0].startswith("Locust worker w1 (host load-c) sent no record after 5.0 s of 30 s")
    assert "records by worker: w0 30, w1 6" in said[0]
    assert fleet.silent_workers(records + [rec("w1", t) for t in range(6, 29)], 2, 0.0, 30.0) == []
    none = fleet.silent_workers([rec("w0", 1)], 2, 0.0, 30.0)
    assert any("w1 sent no record at all" in s for s in none)
    assert fleet.silent_workers(records, 1, 0.0, 30.0) == []  # one process: nothing to compare
