"""Two runs compared: no change reads as no change (at about the stated false-alarm rate), a 20 % slowdown reads
as worse, and Holm's correction keeps a family of figures from flagging by chance."""

import numpy as np
import pytest

from chaos.verify.compare import (BETTER, NOT_JUDGED, SAME, WORSE, compare_figures, compare_latency,
                                  compare_proportions, compare_rates, holm, latency_figures)


def lognormal(rng, n, scale=1.0):
    return 0.2 * scale * rng.lognormal(0.0, 0.5, n)  # E2E-like: ~200 ms median, a long right tail


def test_identical_distributions_are_no_detectable_change_most_of_the_time():
    rng = np.random.default_rng(11)
    same_p50 = family_clean = 0
    for trial in range(200):
        res = compare_latency(lognormal(rng, 400), lognormal(rng, 400), seed=trial, resamples=1000)
        same_p50 += res["p50"]["verdict"] == SAME
        family_clean += all(f["verdict"] == SAME for f in compare_figures(latency_figures(res)))
    assert same_p50 / 200 >= 0.93
    assert family_clean / 200 >= 0.93


def test_a_20_percent_slowdown_is_worse():
    rng = np.random.default_rng(12)
    worse = 0
    for trial in range(100):
        res = compare_latency(lognormal(rng, 400), lognormal(rng, 400, scale=1.2), seed=trial, resamples=1000)
        worse += res["p50"]["verdict"] == WORSE
        assert res["p50"]["verdict"] != BETTER
    assert worse / 100 >= 0.95
    r = res["p50"]
    assert r["ratio"]["low"] <= r["ratio"]["value"] <= r["ratio"]["high"] and r["difference"]["value"] > 0
    assert res["mann_whitney"]["effect"] > 0.5


def test_latency_verdict_is_the_interval_rule_and_mirrors():
    rng = np.random.default_rng(13)
    a, b = lognormal(rng, 1000), lognormal(rng, 1000, scale=0.8)
    res = compare_latency(a, b)
    assert res["p50"]["verdict"] == BETTER and res["mann_whitney"]["verdict"] == BETTER
    assert res["p50"]["ratio"]["high"] < 1
    # With a tolerance wider than the change, no figure may call it.
    tolerant = compare_latency(a, b, tolerance=0.3)
    assert tolerant["p50"]["verdict"] == SAME and tolerant["mann_whitney"]["verdict"] == SAME
    # The verdict and the interval say the same thing: a change exactly when the interval clears 1 +- tolerance.
    for tol in (0.0, 0.1, 0.2, 0.25):
        for fig in latency_figures(compare_latency(a, b, tolerance=tol))[1:]:
            changed = fig["ratio"]["high"] < 1 - tol or fig["ratio"]["low"] > 1 + tol
            assert (fig["verdict"] != SAME) == changed, (tol, fig["figure"])
            assert (fig["p_value"] <= 0.05) == changed


def test_too_few_values_for_a_p99_is_not_judged():
    rng = np.random.default_rng(14)
    res = compare_latency(lognormal(rng, 60), lognormal(rng, 500))
    assert res["p99"]["verdict"] == NOT_JUDGED and res["p99"]["p_value"] is None and "n>=100" in res["p99"]["why"]
    assert res["p50"]["verdict"] in (SAME, WORSE, BETTER)
    assert compare_latency([], [1.0, 2.0])["mann_whitney"]["verdict"] == NOT_JUDGED


def test_proportions_both_directions_and_small_counts():
    worse = compare_proportions(10, 1000, 40, 1000)
    assert worse["verdict"] == WORSE and worse["test"] == "pooled z"
    assert worse["difference"]["low"] > 0 and worse["b"]["method"] == "wilson"
    assert compare_proportions(40, 1000, 10, 1000)["verdict"] == BETTER
    assert compare_proportions(20, 1000, 20, 1000)["verdict"] == SAME
    small = compare_proportions(0, 200, 3, 200)
    assert small["test"] == "fisher" and small["verdict"] == SAME  # 3 of 200 against none: not enough
    assert compare_proportions(0, 2000, 25, 2000)["verdict"] == WORSE
    # Absolute tolerance: 1 % -> 4 % clears a 1-point tolerance, not a 5-point one.
    assert compare_proportions(10, 1000, 40, 1000, tolerance=0.01)["verdict"] == WORSE
    assert compare_proportions(10, 1000, 40, 1000, tolerance=0.05)["verdict"] == SAME
    # A success rate: higher is better.
    assert compare_proportions(900, 1000, 950, 1000, higher_is_worse=False)["verdict"] == BETTER
    assert compare_proportions(0, 0, 1, 10)["verdict"] == NOT_JUDGED


def test_proportion_false_alarms_stay_near_alpha():
    rng = np.random.default_rng(15)
    k1, k2 = rng.binomial(800, 0.03, 500), rng.binomial(800, 0.03, 500)
    flagged = sum(compare_proportions(int(a), 800, int(b), 800)["verdict"] != SAME for a, b in zip(k1, k2))
    assert flagged / 500 <= 0.07


def test_rates_both_directions():
    fell = compare_rates(1000, 10.0, 800, 10.0)
    assert fell["verdict"] == WORSE and fell["ratio"]["high"] < 1 and fell["test"] == "conditional binomial"
    assert compare_rates(800, 10.0, 1000, 10.0)["verdict"] == BETTER
    assert compare_rates(1000, 10.0, 990, 10.0)["verdict"] == SAME
    assert compare_rates(1000, 10.0, 1530, 15.0)["verdict"] == SAME  # 100/s against 102/s: noise at these counts
    assert compare_rates(1000, 10.0, 1650, 15.0)["verdict"] == BETTER  # against 110/s: z ~ 2.4
    assert compare_rates(1000, 10.0, 800, 10.0, tolerance=0.25)["verdict"] == SAME
    assert compare_rates(1000, 10.0, 800, 10.0, higher_is_better=False)["verdict"] == BETTER  # e.g. errors/s
    rng = np.random.default_rng(16)
    c1, c2 = rng.poisson(500, 400), rng.poisson(500, 400)
    flagged = sum(compare_rates(int(a), 5.0, int(b), 5.0)["verdict"] != SAME for a, b in zip(c1, c2))
    assert flagged / 400 <= 0.07
    assert compare_rates(0, 10.0, 0, 10.0)["verdict"] == NOT_JUDGED


def test_holm_on_known_p_values():
    # Sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> kept monotone: 0.06.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    with_none = holm([0.2, None, 0.01])
    assert with_none[1] is None and with_none[0] == pytest.approx(0.2) and with_none[2] == pytest.approx(0.02)
    assert holm([]) == []
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # 0.8 x 2 caps at 1, and no later one may be smaller


def test_compare_figures_takes_back_a_lone_near_miss_in_a_family():
    fig = {"figure": "E2E p95", "p_value": 0.03, "verdict": WORSE}
    alone = compare_figures([fig])
    assert alone[0]["verdict"] == WORSE and alone[0]["p_holm"] == pytest.approx(0.03)
    family = compare_figures([fig] + [{"figure": f"f{i}", "p_value": 0.5, "verdict": SAME} for i in range(9)]
                             + [{"figure": "p99", "p_value": None, "verdict": NOT_JUDGED}])
    assert family[0]["verdict"] == SAME and family[0]["verdict_unadjusted"] == WORSE
    assert family[0]["p_holm"] == pytest.approx(0.3)  # m = 10: the not-judged figure does not count
    assert family[-1]["verdict"] == NOT_JUDGED and family[-1]["p_holm"] is None
    strong = compare_figures([{"figure": "x", "p_value": 1e-6, "verdict": WORSE}, fig])
    assert strong[0]["verdict"] == WORSE and strong[1]["verdict"] == WORSE  # 0.03 x 1 after the first


def test_twenty_null_figures_flag_less_often_after_holm():
    # Why the correction exists: 20 independent null figures at 5 % each flag something in ~64 % of runs.
    rng = np.random.default_rng(17)
    raw = corrected = 0
    for _ in range(500):
        p = rng.random(20)
        figs = [{"figure": str(i), "p_value": float(x), "verdict": WORSE if x <= 0.05 else SAME}
                for i, x in enumerate(p)]
        raw += any(f["verdict"] != SAME for f in figs)
        corrected += any(f["verdict"] != SAME for f in compare_figures(figs))
    assert raw / 500 > 0.5 and corrected / 500 <= 0.08


def test_grouped_resampling_keeps_false_alarms_near_alpha_when_requests_share_hiccups():
    # Each run: 20 half-seconds of 25 requests; a half-second's requests share a random slowdown (a host hiccup).
    # Both runs come from the same process, so every flag is false. Resampled as independent requests the P50's
    # interval is far too narrow; resampled by half-second it is about right.
    rng = np.random.default_rng(18)
    labels = np.repeat(np.arange(20), 25)

    def run():
        return lognormal(rng, 500) * np.exp(rng.normal(0, 0.2, 20))[labels]

    iid = grouped = 0
    for trial in range(100):
        a, b = run(), run()
        iid += compare_latency(a, b, seed=trial, resamples=400, qs=(50,))["p50"]["verdict"] != SAME
        res = compare_latency(a, b, seed=trial, resamples=400, qs=(50,), groups=(labels, labels))
        grouped += res["p50"]["verdict"] != SAME
    assert res["groups"] == [20, 20]
    # 200 trials gave 28.5 % and 6.5 %: a bootstrap over 20 groups is a little liberal ((G-1)/G of the variance).
    assert iid / 100 > 0.2 and grouped / 100 <= 0.12


def test_groups_must_match_the_values():
    with pytest.raises(ValueError, match="one label per value"):
        compare_latency([1.0, 2.0, 3.0], [1.0, 2.0], groups=([0, 0], [0, 1]))


# -- one value a run: recovery times (the gate) -------------------------------------------------------------------

def test_compare_values_calls_a_clear_slowdown_worse_and_noise_no_change():
    from chaos.verify.compare import compare_values

    a, b = [8.1, 8.4, 8.2, 8.3], [12.0, 12.5, 11.8, 12.2]
    f = compare_values(a, b, tolerance=0.1, floor=0.5, name="time to restore")
    assert f["verdict"] == "worse" and f["p_value"] < 0.01 and f["test"] == "welch"
    assert abs(f["allowed_change"] - 0.825) < 1e-9  # 10 % of the baseline mean beats the 0.5 s floor
    assert compare_values(b, a, tolerance=0.1, floor=0.5)["verdict"] == "better"
    same = compare_values(a, [8.3, 8.0, 8.5, 8.2], tolerance=0.1, floor=0.5)
    assert same["verdict"] == "no detectable change" and same["p_value"] > 0.5


def test_compare_values_needs_two_a_side_and_respects_the_floor():
    from chaos.verify.compare import compare_values

    one = compare_values([8.0], [9.0, 9.1])
    assert one["verdict"] == "not judged" and one["needs_runs"] == 2
    # 30 ms -> 60 ms doubles, but a floor of 0.5 s says a change that small does not count
    assert compare_values([0.03, 0.031, 0.029], [0.06, 0.061, 0.059], floor=0.5)["verdict"] == "no detectable change"
    assert compare_values([0.03, 0.031, 0.029], [0.06, 0.061, 0.059], floor=0.0)["verdict"] == "worse"


def test_compare_values_without_spread_reports_the_permutation_resolution_not_zero():
    from chaos.verify.compare import compare_values

    f = compare_values([1.0, 1.0, 1.0], [3.0, 3.0, 3.0], floor=0.1)
    assert f["verdict"] == "worse" and f["p_value"] == 2 * 1 / (2 * 20)  # C(6, 3) = 20, two-sided


def test_compare_latency_floor_widens_the_tolerance_of_small_percentiles():
    import numpy as np

    from chaos.verify.compare import compare_latency

    rng = np.random.default_rng(1)
    a = rng.normal(0.020, 0.001, 3000)
    b = a + 0.002  # +10 % of a 20 ms figure: 2 ms
    strict = compare_latency(a, b, tolerance=0.0, qs=(50,))
    floored = compare_latency(a, b, tolerance=0.0, qs=(50,), floor=0.005)
    assert strict["p50"]["verdict"] == "worse"
    assert floored["p50"]["verdict"] == "no detectable change" and floored["p50"]["tolerance"] > 0.2
