"""The gate's plan: the interleaved order of runs and the bounds of --repeat (no runs here)."""

import pytest

from chaos.gate.gate import GateError, Plan, order


def test_each_pair_alternates_which_side_goes_first():
    assert order(1) == ["a", "b"]
    assert order(2) == ["a", "b", "b", "a"]
    assert order(3) == ["a", "b", "b", "a", "a", "b"]
    # over an even number of pairs, each side runs first as often: drift over the session cancels
    seq = order(4)
    firsts = [seq[i] for i in range(0, len(seq), 2)]
    assert firsts.count("a") == firsts.count("b") == 2


@pytest.mark.parametrize("repeat", [0, 51])
def test_repeat_is_bounded(repeat):
    with pytest.raises(GateError, match="--repeat"):
        Plan(suite=None, out_dir="o", candidate="c", baseline_target="b", repeat=repeat)
