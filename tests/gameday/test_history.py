"""The game-day history (SQLite) and the rule that flags a figure which moved beyond its noise."""

from chaos.gameday.history import History, Point, moved


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


def test_intervals_that_do_not_overlap_are_flagged_and_overlapping_ones_are_not():
    assert moved([pt(1, 0.5, 0.45, 0.55), pt(2, 0.8, 0.7, 0.9)]).startswith("up")
    assert moved([pt(1, 0.5, 0.45, 0.55), pt(2, 0.3, 0.25, 0.35)]).startswith("down")
    assert moved([pt(1, 0.5, 0.45, 0.55), pt(2, 0.56, 0.5, 0.6)]) is None


def test_one_value_a_run_needs_three_earlier_points_and_moves_beyond_range_and_slack():
    base = [pt(i, v) for i, v in enumerate([8.0, 8.4, 8.2])]
    assert moved(base[:2] + [pt(9, 20.0)]) is None  # two earlier points are no range to judge against
    assert moved(base + [pt(9, 9.0)]) is None  # within 8.0-8.4 widened by max(10 % of 8.2, 0.5 s)
    assert moved(base + [pt(9, 9.5)]).startswith("up")
    assert moved(base + [pt(9, 6.0)]).startswith("down")
