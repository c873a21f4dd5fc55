"""The game-day history (SQLite) and the rule that flags a figure which moved beyond its noise."""

import numpy as np

from chaos.gameday.history import History, Point, median_host, moved
from chaos.host import HostSummary


def pt(i, value, low=None, high=None, unit="s"):
    return Point(i, 1000.0 + i, "kill", "fig", value, low, high, 100, unit)


def test_append_and_read_back_in_order(tmp_path):
    h = History(str(tmp_path / "g" / "history.sqlite"))
    for i, v in enumerate([1.0, 2.0]):
        gid = h.append({"started": 100.0 + i, "suite": "s", "dir": f"d{i}", "status": "finished", "score": 50.0 + i},
                       [{"experiment": "kill", "figure": "time to restore", "value": v},
                        {"experiment": "kill", "figure": "E2E P99, steady state", "value": v / 10, "low": 0.05,
                         "high": 0.3, "n": 400}])
        assert gid == i + 1
    h.close()
    h = History(str(tmp_path / "g" / "history.sqlite"))  # survives reopening
    assert [g["score"] for g in h.gamedays()] == [50.0, 51.0]
    series = h.series()
    assert [p.value for p in series[("kill", "time to restore")]] == [1.0, 2.0]
    assert series[("kill", "E2E P99, steady state")][-1].low == 0.05


def series(values, unit="s", figure="E2E P99, steady state"):
    return [Point(i, 1000.0 + i, "kill", figure, v, None, None, 100, unit) for i, v in enumerate(values)]


def test_nothing_is_called_with_fewer_than_five_earlier_game_days_and_it_says_so():
    m = moved(series([0.053, 0.5]))  # the 53 -> 76 ms, and far more: one earlier game day is no spread
    assert m.direction is None and not m.judged and "1 earlier game day(s): judged from 5" in m.text


def test_unchanged_code_flags_nothing_in_all_but_alpha_of_game_days():
    """Synthetic nightly histories of 16 figures with a run-to-run spread of ~20 % (what two game days of the
    same code showed: 53 -> 76 ms): each game day judged against its 5-20 predecessors, Bonferroni over 16.
    Known truth: nothing changed, so any flag is false; the share of game days with one must be about 1 % (the
    rule's 99 %), never near the 1 in 20 a nightly alarm would make."""
    rng = np.random.default_rng(4)
    days, flagged = 0, 0
    for _ in range(40):
        hist = rng.lognormal(np.log(0.06), 0.2, size=(16, 26))
        for t in range(5, 26):
            days += 1
            flagged += any(moved(series(list(hist[f, :t + 1])), family=16).direction for f in range(16))
    assert flagged / days <= 0.02, (flagged, days)


def test_a_step_beyond_the_spread_is_called_in_its_unit():
    rng = np.random.default_rng(5)
    values = list(rng.lognormal(np.log(0.06), 0.1, 12)) + [0.15]
    m = moved(series(values), family=16)
    assert m.direction == "up" and "150 ms" in m.text and "12 earlier game days allow" in m.text
    assert "0.0" not in m.text.split("allow")[1]  # milliseconds, never raw seconds
    down = moved(series(values[:-1] + [0.02]), family=16)
    assert down.direction == "down"


def test_within_the_tolerance_is_not_a_move_however_tight_the_history():
    values = [0.0600, 0.0601, 0.0599, 0.0600, 0.0602, 0.0598, 0.0630]  # 5 % up: beyond the spread, not 10 %
    assert moved(series(values)).direction is None
    assert moved(series([8.0, 8.01, 8.02, 7.99, 8.0, 8.3], figure="time to restore")).direction is None  # < 0.5 s


def test_a_time_is_not_called_where_the_host_differed():
    rng = np.random.default_rng(6)
    values = list(rng.lognormal(np.log(0.06), 0.1, 10)) + [0.15]
    quiet, busy = HostSummary(30, 2, 0.02, 0.05), HostSummary(30, 2, 0.98, 1.0)
    m = moved(series(values), host=busy, history_host=quiet)
    assert m.direction is None and m.held_for_host and "host differed" in m.text and "0.98" in m.text
    assert moved(series(values), host=quiet, history_host=quiet).direction == "up"


def test_a_share_moves_by_points():
    values = [0.01, 0.012, 0.011, 0.009, 0.01, 0.2]
    m = moved(series(values, unit="fraction", figure="error budget spent"))
    assert m.direction == "up" and "20.00%" in m.text
    assert moved(series(values[:-1] + [0.018], unit="fraction")).direction is None  # under one point


def test_the_host_of_each_game_day_is_kept(tmp_path):
    h = History(str(tmp_path / "history.sqlite"))
    gid = h.append({"started": 1.0, "suite": "s", "dir": "d", "status": "finished"},
                   [{"experiment": "kill", "figure": "f", "value": 1.0}], {"kill": HostSummary(10, 2, 0.5, 0.9, 1.2)})
    assert h.hosts()[(gid, "kill")].others == 0.5
    assert median_host([HostSummary(1, others=0.1), HostSummary(1, others=0.9), HostSummary(1, others=0.2)]).others == 0.2
    h.remove(gid)
    assert h.hosts() == {}
