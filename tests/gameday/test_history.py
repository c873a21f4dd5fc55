"""The game-day history (SQLite): appended, read back in order, each game day's host kept."""

from chaos.gameday.history import History, Point, median_host
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
    assert series[("kill", "time to restore")][-1].day == "d1"  # the game day's folder name


def test_the_host_of_each_game_day_is_kept(tmp_path):
    h = History(str(tmp_path / "history.sqlite"))
    gid = h.append({"started": 1.0, "suite": "s", "dir": "d", "status": "finished"},
                   [{"experiment": "kill", "figure": "f", "value": 1.0}], {"kill": HostSummary(10, 2, 0.5, 0.9, 1.2)})
    assert h.hosts()[(gid, "kill")].others == 0.5
    assert median_host([HostSummary(1, others=0.1), HostSummary(1, others=0.9), HostSummary(1, others=0.2)]).others == 0.2
    h.remove(gid)
    assert h.hosts() == {}
