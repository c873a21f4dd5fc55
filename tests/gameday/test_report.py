"""gameday.md names each change point's game day, both levels and its p; gameday.html marks it on the trend plot."""

import json

import numpy as np

from chaos.gameday.changes import all_changes
from chaos.gameday.history import History
from chaos.gameday.report import markdown, trend_figure


def history(tmp_path):
    h = History(str(tmp_path / "history.sqlite"))
    rng = np.random.default_rng(11)
    for i in range(30):
        level = 0.060 * (1.5 if i >= 20 else 1.0)
        gid = h.append({"started": 1.8e9 + 86400 * i, "suite": "s", "dir": f"/g/s/2027{i:04d}T030000Z",
                        "status": "finished", "score": 100.0},
                       [{"experiment": "kill", "figure": "E2E P99, steady state", "value": level * rng.lognormal(0, 0.05)},
                        {"experiment": "kill", "figure": "error budget spent", "value": 0.0, "unit": "fraction"}])
    series = h.series()
    h.close()
    return series, gid


def test_the_markdown_names_the_game_day_both_levels_and_p(tmp_path):
    series, gid = history(tmp_path)
    changes = all_changes(series, gid)
    doc = {"suite": "s", "status": "finished", "score": 100.0, "started": 1.8e9, "passed": 0, "experiments": 0,
           "runs": [], "history_id": gid}
    md = markdown(doc, str(tmp_path), series, changes)
    section = md.split("## Change points in the key figures' history")[1].split("## Key figures")[0]
    (line,) = [x for x in section.splitlines() if x.startswith("- ")]
    assert "**kill: E2E P99, steady state** up at game day 20270020T030000Z (" in line
    assert "61 ms -> 86 ms (x1.42), p 2e-20" in line and ", p " in line and "20 game days before, 10 after" in line


def test_the_trend_plot_marks_each_change_point_and_the_levels(tmp_path):
    series, gid = history(tmp_path)
    key = ("kill", "E2E P99, steady state")
    changes = [c for c in all_changes(series, gid) if (c.experiment, c.figure) == key]
    fig = json.loads(trend_figure(*key, series[key], changes).to_json())
    (line,) = fig["layout"]["shapes"]
    x = series[key][20]
    assert line["x0"] == line["x1"] and line["x0"].startswith("2027-") and line["line"]["dash"] == "dash"
    assert any("up 61 ms -> 86 ms" in a["text"] for a in fig["layout"]["annotations"])
    level = fig["data"][1]
    assert level["name"] == "level" and level["y"][0] < 61 / 1000 < level["y"][-1] and x.value
    plain = json.loads(trend_figure(*key, series[key]).to_json())
    assert len(plain["data"]) == 1 and not plain["layout"].get("shapes")
