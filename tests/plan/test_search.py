"""The capacity search's decision rule on given verdicts (chaos.plan.search): no load, a known truth."""

import random

import pytest

from chaos.plan.search import Level, SearchConfig, knee, next_probe
from chaos.plan.slo import BREAKS, MEETS, UNCLEAR


def drive(cfg, truth, leans=None):
    """Run the search against truth(level, probes so far) -> verdict of the pooled probes (and leans(level) -> where
    an unclear level's point figures lie); (levels, order)."""
    levels, order = {}, []
    while (nxt := next_probe(levels, cfg)) is not None:
        level, _ = nxt
        order.append(level)
        s = levels.setdefault(level, Level())
        s.probes += 1
        s.verdict = truth(level, s.probes)
        if leans is not None:
            s.leans = leans(level)
        assert len(order) <= cfg.max_probes
    return levels, order


@pytest.mark.parametrize("cap, start", [(1, 1), (5, 1), (6, 2), (37, 1), (600, 10), (3, 8)])
def test_a_sharp_capacity_is_found_exactly(cap, start):
    cfg = SearchConfig(start=start, max_probes=30)
    levels, order = drive(cfg, lambda x, n: MEETS if x <= cap else BREAKS)
    k = knee(levels)
    assert (k.low, k.high) == (cap, cap + 1)
    assert all(isinstance(x, int) for x in order)
    assert len(order) == len(set(order))  # a decided level is never probed twice


def test_the_knee_when_even_the_first_level_breaks():
    levels, _ = drive(SearchConfig(start=4, max_probes=20), lambda x, n: BREAKS)
    assert (knee(levels).low, knee(levels).high) == (None, 1)


def test_no_break_within_max_level():
    levels, order = drive(SearchConfig(start=1, max_level=64, max_probes=20), lambda x, n: MEETS)
    k = knee(levels)
    assert (k.low, k.high) == (64, None) and order == [1, 2, 4, 8, 16, 32, 64]


def test_the_climb_always_goes_past_the_expected_load():
    # the target breaks at 5 users, but the user expects 100: the seed insists on probing beyond it
    levels, order = drive(SearchConfig(start=1, expected=100, max_probes=30), lambda x, n: MEETS if x <= 4 else BREAKS)
    assert max(order) > 100
    assert (knee(levels).low, knee(levels).high) == (4, 5)


def test_unclear_levels_near_the_boundary_are_repeated_then_bounded():
    # levels 9..11 need 2 probes to be decided; 12 never is
    def truth(x, n):
        if x == 12:
            return UNCLEAR
        if 9 <= x <= 11 and n < 2:
            return UNCLEAR
        return MEETS if x <= 10 else BREAKS
    cfg = SearchConfig(start=1, max_probes=40, max_repeats=3)
    levels, order = drive(cfg, truth)
    k = knee(levels)
    assert (k.low, k.high) == (10, 11)
    assert all(levels[x].probes <= 3 for x in levels)
    assert order.count(12) <= 3


def test_a_level_left_unclear_stays_inside_the_knee():
    levels, _ = drive(SearchConfig(start=1, max_probes=40, max_repeats=2),
                      lambda x, n: MEETS if x <= 6 else UNCLEAR if x <= 9 else BREAKS)
    k = knee(levels)
    assert k.low == 6 and k.high == 10 and k.unclear and all(6 < x < 10 for x in k.unclear)


def test_max_probes_bounds_everything():
    levels, order = drive(SearchConfig(start=1, max_probes=5), lambda x, n: UNCLEAR)
    assert len(order) == 5


def test_noisy_truth_keeps_the_knee_honest():
    # verdicts are right or unclear, never wrong: the true capacity always lies in [low, high)
    for seed in range(30):
        rng = random.Random(seed)
        cap = rng.randint(2, 300)

        def truth(x, n):
            if abs(x - cap) <= max(1, cap // 10) and rng.random() < 0.7:
                return UNCLEAR
            return MEETS if x <= cap else BREAKS
        levels, _ = drive(SearchConfig(start=1, max_probes=20), truth)
        k = knee(levels)
        assert (k.low or 0) <= cap < (k.high or 10 ** 9)


def test_rates_bisect_to_the_resolution():
    cfg = SearchConfig(start=0.5, integer=False, resolution=0.05, max_probes=30)
    levels, order = drive(cfg, lambda x, n: MEETS if x <= 7.3 else BREAKS)
    k = knee(levels)
    assert k.low <= 7.3 < k.high and k.high / k.low - 1 <= 0.05
    assert all(isinstance(x, float) for x in order)


@pytest.mark.parametrize("kw, says", [
    ({"start": 0}, "start"), ({"start": 1.5}, "whole number"), ({"factor": 1}, "factor"),
    ({"max_level": 0.5}, "below the start"), ({"expected": 2000, "max_level": 1024}, "past the expected"),
    ({"max_probes": 0}, "at least 1"), ({"integer": False, "resolution": 0}, "resolution"),
])
def test_bad_search_settings_are_refused(kw, says):
    with pytest.raises(ValueError) as e:
        SearchConfig(**kw)
    assert says in str(e.value)


def test_before_any_break_an_unclear_level_that_leans_to_meet_does_not_stop_the_climb():
    # the case: errors<1% needs ~600 requests to be shown at 0 errors, so low levels stay unclear a while;
    # their point figures meet the SLO, so the climb goes on and finds the break first, then decides them
    cap = 6
    levels, order = drive(SearchConfig(start=1, max_probes=12),
                          lambda x, n: BREAKS if x > cap else (MEETS if n >= 2 else UNCLEAR),
                          lambda x: BREAKS if x > cap else MEETS)
    assert order[:4] == [1, 2, 4, 8]  # climbed through the unclear 1, 2 and 4 to the break at 8
    assert (knee(levels).low, knee(levels).high) == (6, 7)
