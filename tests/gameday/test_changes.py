"""Change points in a figure's game-day history (chaos/gameday/changes.py): where, how big, how sure, the tolerance
and the host guard, and the detector's error rates on seeded synthetic histories, each with its binomial interval."""

import numpy as np
import pytest
from scipy.stats import binomtest

from chaos.gameday.changes import Rule, all_changes, figure_changes, too_short
from chaos.gameday.history import Point
from chaos.host import HostSummary


def series(values, unit="s", figure="E2E P99, steady state", exp="kill"):
    return [Point(i, 1.8e9 + 86400 * i, exp, figure, None if v is None else float(v), None, None, 100, unit,
                  day=f"2027{i:04d}T030000Z") for i, v in enumerate(values)]


def noisy(rng, n, level=0.060, sd=0.1):
    return list(level * rng.lognormal(0, sd, n))


def test_a_step_is_named_by_its_game_day_with_both_levels_and_its_p():
    rng = np.random.default_rng(1)
    values = noisy(rng, 25) + noisy(rng, 10, level=0.090)
    (c,) = figure_changes(series(values))
    assert abs(c.at.gameday_id - 25) <= 1 and c.direction == "up" and c.n_before + c.n_after == 35
    assert c.before == pytest.approx(0.060, rel=0.06) and c.after == pytest.approx(0.090, rel=0.08)
    assert c.p < 1e-4
    text = c.text()
    assert text.startswith(f"up at game day {c.at.day} (") and " ms -> 8" in text and "p " in text
    assert "0.0" not in text.split("->")[0]  # milliseconds, never raw seconds


def test_nothing_is_called_under_min_history_and_it_says_so():
    pts = series([0.05, 0.05, 0.5, 0.5])
    assert figure_changes(pts) == []
    assert "1 figure(s) have fewer than 5 game days (the fewest: 4)" in too_short({("kill", "f"): pts}, 3)
    assert too_short({("kill", "f"): series([0.05] * 6)}, 5) is None


def test_a_step_within_the_tolerance_is_not_called_however_sure():
    values = [0.0600, 0.0601, 0.0599, 0.0600, 0.0602, 0.0598] * 3 + [0.0630, 0.0631, 0.0629] * 3  # +5 %
    assert figure_changes(series(values)) == []
    restore = [8.0, 8.01, 7.99] * 4 + [8.3, 8.31, 8.29] * 4  # +3.7 % and 0.3 s: under 0.5 s
    assert figure_changes(series(restore, figure="time to restore")) == []
    (c,) = figure_changes(series(values[:18] + [0.0700, 0.0701, 0.0699] * 3))  # +17 % and 10 ms: called
    assert c.at.gameday_id == 18


def test_a_share_changes_by_points():
    shares = [0.0] * 12 + [0.05] * 6
    (c,) = figure_changes(series(shares, unit="fraction", figure="error budget spent"))
    assert c.before == 0.0 and c.after == pytest.approx(0.05) and "+5.00 points" in c.text()
    assert figure_changes(series([0.0] * 12 + [0.005] * 6, unit="fraction")) == []  # half a point


def test_a_time_is_not_called_where_the_hosts_either_side_differed():
    rng = np.random.default_rng(2)
    values = noisy(rng, 15) + noisy(rng, 10, level=0.090)
    quiet, busy = HostSummary(30, 2, 0.02, 0.05), HostSummary(30, 2, 0.98, 1.0)
    hosts = {(i, "kill"): quiet if i < 15 else busy for i in range(25)}
    (c,) = figure_changes(series(values), hosts=hosts)
    assert c.held and "0.98" in c.held
    assert not figure_changes(series(values), hosts={k: quiet for k in hosts})[0].held


def test_a_change_the_latest_game_day_brought_to_light_is_new():
    rng = np.random.default_rng(3)
    old_step = noisy(rng, 15) + noisy(rng, 15, level=0.100)
    pts = series(old_step)
    changes = all_changes({("kill", "f"): pts}, gameday_id=pts[-1].gameday_id)
    assert len(changes) == 1 and not changes[0].new  # found before this game day already
    fresh = series(noisy(rng, 20) + [0.3])  # the latest game day alone, far beyond: found with it
    changes = all_changes({("kill", "f"): fresh}, gameday_id=20)
    assert [c.at.gameday_id for c in changes] == [20] and changes[0].new


def test_the_rules_settings_are_checked():
    for bad in ({"min_history": 2}, {"tolerance": -0.1}, {"window": 2}, {"max_p": 1.0}):
        with pytest.raises(ValueError):
            Rule(**bad)


def rate(hits: int, n: int):
    return binomtest(hits, n).proportion_ci(0.95)


def test_error_rates_on_seeded_histories():
    """Known truth, 60 game days each, a run-to-run spread of 10 % (the whole history judged at once, as the last
    game day's report does): unchanged code; a 20 % step at game day 30. Aims: a history of unchanged code shows a
    change point in at most 10 % of histories; a step is found, at its game day (within 2), in at least 70 %."""
    rng = np.random.default_rng(7)
    n = 100
    false = sum(bool(figure_changes(series(noisy(rng, 60)))) for _ in range(n))
    found = 0
    for _ in range(n):
        steps = figure_changes(series(noisy(rng, 30) + noisy(rng, 30, 0.072)))
        found += any(abs(c.at.gameday_id - 30) <= 2 for c in steps)
    assert rate(false, n).high <= 0.10, (false, n)
    assert rate(found, n).low >= 0.70, (found, n)
