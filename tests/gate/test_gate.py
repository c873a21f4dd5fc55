"""The gate's plan: the pairs' orders drawn by a seeded coin, and the bounds of --pairs (no runs here)."""

import pytest

from chaos.gate.gate import MAX_PAIRS, Plan
from chaos.gate.verdict import GateError
from chaos.gate.pairs import draw_orders


def test_each_pairs_order_is_a_coin_of_the_seed():
    assert draw_orders(8, seed=3) == draw_orders(8, seed=3)
    assert draw_orders(8, seed=3) != draw_orders(8, seed=4)
    orders = draw_orders(2000, seed=1)
    assert set(orders) == {"ab", "ba"}
    assert abs(orders.count("ab") / 2000 - 0.5) < 0.04  # a fair coin: 0.5 +- 3.6 standard errors


def test_the_seed_is_drawn_and_kept_when_not_given():
    a = Plan(suite=None, out_dir="o", candidate="c", baseline_target="b")
    b = Plan(suite=None, out_dir="o", candidate="c", baseline_target="b")
    assert isinstance(a.seed, int) and a.seed != b.seed
    assert Plan(suite=None, out_dir="o", candidate="c", baseline_target="b", seed=9).seed == 9


@pytest.mark.parametrize("pairs", [0, MAX_PAIRS + 1])
def test_pairs_are_bounded(pairs):
    with pytest.raises(GateError, match="--pairs"):
        Plan(suite=None, out_dir="o", candidate="c", baseline_target="b", pairs=pairs)
