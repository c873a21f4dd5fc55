"""The seed's cost sum (chaos.plan.cost): instances for a load and the cost of 1,000 requests at the SLO."""

import pytest

from chaos.plan.cost import CostInputs, cost_sum


def test_the_seeds_sum_instances_for_100_concurrency():
    # a knee whose safe value is 30 users on 2 replicas: 15 a replica; 100 users need ceil(100/15) = 7
    got = cost_sum(CostInputs(safe_level=30, replicas=2, for_level=100))
    assert got["per_instance"] == 15 and got["instances"] == 7
    assert got["cost_per_1k_requests"] == {}


def test_an_exact_division_does_not_buy_one_more_instance():
    assert cost_sum(CostInputs(safe_level=300, replicas=3, for_level=100))["instances"] == 1
    assert cost_sum(CostInputs(safe_level=0.3, replicas=3, for_level=0.7))["instances"] == 7


def test_cost_per_thousand_requests_from_either_price():
    got = cost_sum(CostInputs(safe_level=20, replicas=2, for_level=100, price_per_hour=3.0, rps_at_safe=10.0,
                              price_per_1k_tokens=0.002, tokens_per_request=3350))
    # 2 instances at 3/h serve 10 req/s = 36,000 req/h: 6 / 36 per 1,000
    assert got["cost_per_1k_requests"]["by_hour"] == pytest.approx(6 / 36)
    assert got["cost_per_1k_requests"]["by_tokens"] == pytest.approx(3350 * 0.002)
    assert got["instances"] == 10 and got["cost_per_hour_for_level"] == pytest.approx(30.0)


def test_missing_inputs_say_why():
    got = cost_sum(CostInputs(safe_level=None, for_level=100, price_per_hour=1.0))
    assert got["instances"] is None and "no load level surely met" in got["why_not"][0]
    got = cost_sum(CostInputs(safe_level=10, price_per_hour=1.0, price_per_1k_tokens=1.0))
    assert got["instances"] is None and len(got["why_not"]) == 2


@pytest.mark.parametrize("kw", [{"replicas": 0}, {"for_level": 0}, {"price_per_hour": -1},
                                {"price_per_1k_tokens": float("nan")}])
def test_bad_inputs_are_refused(kw):
    with pytest.raises(ValueError):
        CostInputs(safe_level=10, **kw)
