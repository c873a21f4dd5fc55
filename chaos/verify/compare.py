"""Two runs compared, figure by figure: did run b get worse than run a, better, or is there no change the data can
show? Pure functions on arrays and counts.

Every figure comparison is a dict with "figure", "p_value" (None: not judged) and "verdict", one of
"worse", "better", "no detectable change", "not judged", plus its estimates. The verdict always follows from
p_value: a change is called when p_value <= alpha = 1 - confidence, in the direction the data point. That is
what lets compare_figures correct a whole family of them at once (Holm).

`tolerance` is the smallest change that counts (the null hypothesis becomes "changed by at most tolerance"): 0 is
pure statistics, which with thousands of requests flags a drift of a few percent as real; a regression gate
wants a minimum effect (bench/compare_calibration.py uses 0.1). Relative for latency and rates, absolute (a
difference of fractions) for proportions.

Without `groups` the tests treat each request as an independent draw. Requests in flight together are not (a
hiccup of the host slows them all), and two runs never meet the same host; docs/statistics.md and
bench/compare_calibration.py say what that costs, and how groups and tolerance pay for it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize
from scipy import stats as st

from .paired import positive_mean_interval
from .stats import (Estimate, _wilson, interval_of, min_point_samples, proportion, rate,
                    resample_grouped_percentiles, resample_percentiles, sorted_percentiles)

WORSE, BETTER, SAME, NOT_JUDGED = "worse", "better", "no detectable change", "not judged"


def _alpha(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence!r}")
    return 1 - confidence


def _tol(tolerance: float) -> float:
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), e.g. 0.05 for 5 %; got {tolerance!r}")
    return float(tolerance)


def _verdict(p_up: float, p_down: float, alpha: float, up_is_worse: bool = True) -> tuple[float, str]:
    """Two one-sided p-values (up: b above a beyond tolerance; down: below) -> the two-sided p and the verdict."""
    p = min(1.0, 2 * min(p_up, p_down))
    if p > alpha:
        return p, SAME
    up = p_up <= p_down
    return p, (WORSE if up == up_is_worse else BETTER)


def _not_judged(fig: dict, why: str) -> dict:
    return {**fig, "p_value": None, "verdict": NOT_JUDGED, "why": why}


# -- latency ------------------------------------------------------------------------------------------------------

def compare_latency(a, b, confidence: float = 0.95, seed: int = 0, tolerance: float = 0.0,
                    resamples: int = 2000, qs=(50, 95, 99), name: str = "latency", groups=None,
                    floor: float = 0.0, runs=None) -> dict:
    """Latency samples of run a and run b (seconds, any order), compared.

    Per percentile q ("p50", "p95", "p99"): the bootstrap distribution of P_q(b*) / P_q(a*) and P_q(b*) - P_q(a*),
    with a* and b* resampled independently (`resamples` times, seeded). The rule:
      "worse"  when the ratio's interval at `confidence` lies wholly above 1 + tolerance,
      "better" when it lies wholly below 1 - tolerance,
      else "no detectable change"; "not judged" when a run has fewer than min_point_samples(q) values.
    The interval is [r_(m), r_(B-1-m)] of the sorted resampled ratios, m = floor(B * alpha / 2), so "wholly above
    1 + tolerance" is exactly "at most m of B resamples have b* <= (1 + tolerance) a*", i.e. the bootstrap p-value
    p = 2 * min(#{b* <= (1+tol) a*}, #{b* >= (1-tol) a*}) / B is <= alpha (resolution 2/B; at least 1/B).

    Whole distribution ("mann_whitney"): Mann-Whitney U, two-sided, as two one-sided tests against a scaled by
    1 +- tolerance: "worse" when b is stochastically larger than (1 + tolerance) a at p <= alpha, "better"
    mirrored. `effect` is the common-language effect size P(b > a) + P(b = a) / 2 (0.5: no shift).

    groups: None, or (labels of a, labels of b), one per value: values that share a label are resampled together
    (a cluster bootstrap; e.g. the half-second a request started in). Requests in flight together share the host's
    hiccups, so their latencies are not independent, and an independent resampling makes the tails look surer
    than they are; grouping widens the percentile intervals by what the data show of that. Mann-Whitney cannot
    see groups, so with them its figure keeps its effect size but is not judged.

    runs: None, or (run labels of a, run labels of b), with groups: repeated runs pooled, resampled in two stages
    (runs, then the groups of each run drawn; chaos.verify.stats.resample_grouped_percentiles).

    floor: the smallest absolute change (seconds) that counts, whatever the tolerance: a percentile's tolerance is
    max(tolerance, floor / P_q(a)). A 10 % change of a 20 ms TTFT is 2 ms, which a busy 2-core host makes and
    unmakes between two runs; the calibration (BENCHMARKS.md) is why the gate sets one.

    Returns {"figure", "n_a", "n_b", "confidence", "tolerance", "mann_whitney": figure, "p50": figure, ...};
    latency_figures() lists the figures for compare_figures."""
    alpha, tol = _alpha(confidence), _tol(tolerance)
    ra_, rb_ = (None, None) if runs is None else runs
    if runs is not None:  # filtered alongside the values
        a_in, b_in = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
        ra_, rb_ = np.asarray(ra_)[np.isfinite(a_in)], np.asarray(rb_)[np.isfinite(b_in)]
    (a, ga), (b, gb) = _finite(a, groups and groups[0]), _finite(b, groups and groups[1])
    sa, sb = np.sort(a), np.sort(b)
    na, nb = sa.size, sb.size
    out = {"figure": name, "n_a": na, "n_b": nb, "confidence": confidence, "tolerance": tol, "resamples": resamples,
           "mann_whitney": _mann_whitney(sa, sb, alpha, tol, name)}
    if groups is not None and out["mann_whitney"]["verdict"] != NOT_JUDGED:
        out["mann_whitney"] = {**_not_judged(out["mann_whitney"], "Mann-Whitney counts every request as independent; "
                                             "with groups the percentiles' grouped intervals judge"),
                               "effect": out["mann_whitney"]["effect"]}
    pa, pb = sorted_percentiles(sa, qs, confidence), sorted_percentiles(sb, qs, confidence)
    judged = [q for q in qs if min(na, nb) >= min_point_samples(q)]
    rng = np.random.default_rng(seed)
    if groups is None:
        da = resample_percentiles(sa, judged, resamples, rng) if judged else None
        db = resample_percentiles(sb, judged, resamples, rng) if judged else None
    else:
        da = resample_grouped_percentiles(a, ga, judged, resamples, rng, runs=ra_) if judged else None
        db = resample_grouped_percentiles(b, gb, judged, resamples, rng, runs=rb_) if judged else None
        out["groups"] = [int(np.unique(ga).size), int(np.unique(gb).size)]
    for q in qs:
        key = f"p{q:g}"
        fig = {"figure": f"{name} {key}", "kind": "latency", "a": pa[key].to_dict(), "b": pb[key].to_dict()}
        if q not in judged:
            out[key] = _not_judged(fig, f"a {key} needs n>={min_point_samples(q)} in each run (n={na} and {nb})")
            continue
        i = judged.index(q)
        tol_q = max(tol, floor / pa[key].value) if floor > 0 and pa[key].value else tol
        out[key] = _percentile_figure(fig, da[:, i], db[:, i], pa[key], pb[key], alpha, tol_q, confidence)
        if tol_q != tol:
            out[key]["tolerance"] = tol_q
    return out


def _finite(values, labels):
    v = np.asarray(values, dtype=float).ravel()
    keep = np.isfinite(v)
    if labels is None:
        return v[keep], None
    g = np.asarray(labels).ravel()
    if g.size != v.size:
        raise ValueError(f"groups must give one label per value: {g.size} labels for {v.size} values")
    return v[keep], g[keep]


def _percentile_figure(fig, ra, rb, ea: Estimate, eb: Estimate, alpha, tol, confidence) -> dict:
    B = ra.size
    # Counted without dividing, so a resample whose a-percentile is 0 still counts (as evidence of "worse").
    c_up = int(np.count_nonzero(rb <= (1 + tol) * ra))  # resamples against "b is more than 1+tol times a"
    c_down = int(np.count_nonzero(rb >= (1 - tol) * ra))
    # No resample on the far side still means p ~ 1/B, not 0: B resamples resolve no finer (and Holm needs p > 0
    # to rank honestly). Half a count per side keeps "verdict <=> p <= alpha" intact for any alpha >= 1/B.
    p, verdict = _verdict(max(c_up, 0.5) / B, max(c_down, 0.5) / B, alpha)
    diff_lo, diff_hi = interval_of(rb - ra, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rb / ra
    finite = ratios[np.isfinite(ratios)]
    ratio = None if not ea.value else eb.value / ea.value
    r_lo, r_hi = interval_of(finite, confidence) if finite.size == B else (None, None)
    n = min(ea.n, eb.n)
    return {**fig, "difference": Estimate(eb.value - ea.value, diff_lo, diff_hi, n, confidence, "bootstrap").to_dict(),
            "ratio": Estimate(ratio, r_lo, r_hi, n, confidence, "bootstrap").to_dict(),
            "p_value": p, "verdict": verdict}


def _mann_whitney(sa, sb, alpha, tol, name) -> dict:
    fig = {"figure": f"{name} distribution", "kind": "distribution", "test": "mann-whitney"}
    if sa.size == 0 or sb.size == 0:
        return _not_judged(fig, "a run has no values")
    p_up = st.mannwhitneyu(sb, sa * (1 + tol), alternative="greater").pvalue
    p_down = st.mannwhitneyu(sb, sa * (1 - tol), alternative="less").pvalue
    u = st.mannwhitneyu(sb, sa, alternative="two-sided").statistic  # U of b: #(b > a) + #(b = a) / 2
    p, verdict = _verdict(float(p_up), float(p_down), alpha)
    return {**fig, "effect": float(u) / (sa.size * sb.size), "p_value": p, "verdict": verdict}


def latency_figures(result: dict) -> list[dict]:
    """The figure comparisons of one compare_latency result: the distribution, then each percentile."""
    return [result["mann_whitney"]] + [v for k, v in result.items() if k.startswith("p") and isinstance(v, dict)]


# -- proportions (error rates) ------------------------------------------------------------------------------------

def compare_proportions(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95, tolerance: float = 0.0,
                        name: str = "error rate", higher_is_worse: bool = True) -> dict:
    """k1 of n1 (run a) against k2 of n2 (run b): an error rate, by default (higher is worse).

    tolerance 0: Fisher's exact test when an expected cell count is below 5, else the pooled two-proportion z test
    (two-sided). tolerance > 0 (absolute, e.g. 0.01 = one percentage point): the smallest alpha at which the
    Newcombe interval of b - a excludes [-tolerance, +tolerance] on one side (the interval inverted into a test).
    A change is called when p <= alpha, in the direction of b - a. Each rate carries its Wilson interval and the
    difference its Newcombe (hybrid score) interval; at tolerance 0 an interval that just touches 0 can sit beside
    a verdict from the z or Fisher test, which are not exactly its inversion."""
    alpha, tol = _alpha(confidence), _tol(tolerance)
    ea, eb = proportion(k1, n1, confidence), proportion(k2, n2, confidence)
    fig = {"figure": name, "kind": "proportion", "a": ea.to_dict(), "b": eb.to_dict()}
    if n1 == 0 or n2 == 0:
        return _not_judged(fig, "a run has no requests")
    d = eb.value - ea.value
    lo, hi = _newcombe(k1, n1, k2, n2, confidence)
    fig["difference"] = Estimate(d, lo, hi, min(n1, n2), confidence, "wilson").to_dict()
    if tol == 0:
        p, test = _two_proportion_p(k1, n1, k2, n2)
        up = p / 2 if d > 0 else 1.0
        down = p / 2 if d < 0 else 1.0
    else:
        test = "newcombe"
        up = _newcombe_p(k1, n1, k2, n2, lambda c: _newcombe(k1, n1, k2, n2, c)[0] - tol) / 2
        down = _newcombe_p(k1, n1, k2, n2, lambda c: -tol - _newcombe(k1, n1, k2, n2, c)[1]) / 2
    p, verdict = _verdict(up, down, alpha, up_is_worse=higher_is_worse)
    return {**fig, "test": test, "p_value": p, "verdict": verdict}


def _two_proportion_p(k1, n1, k2, n2) -> tuple[float, str]:
    table = np.array([[k1, n1 - k1], [k2, n2 - k2]])
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    if expected.min() < 5:
        return float(st.fisher_exact(table).pvalue), "fisher"
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = (k2 / n2 - k1 / n1) / se
    return float(2 * st.norm.sf(abs(z))), "pooled z"


def _newcombe(k1, n1, k2, n2, confidence) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p2 - p1, from the two Wilson intervals."""
    z = float(st.norm.ppf(1 - (1 - confidence) / 2))
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = _wilson(k1, n1, z), _wilson(k2, n2, z)
    d = p2 - p1
    return d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


def _newcombe_p(k1, n1, k2, n2, margin) -> float:
    """The two-sided p of a one-sided exclusion: the smallest alpha whose (1 - alpha) interval has margin > 0.
    margin(confidence) shrinks as confidence grows (the interval widens), so a root search finds it."""
    lo_c, hi_c = 1e-9, 1 - 1e-12  # confidence ~0: the interval is the point d; ~1: as wide as it gets
    if margin(lo_c) <= 0:
        return 1.0  # even the point estimate is within tolerance
    if margin(hi_c) > 0:
        return 1e-12
    c = optimize.brentq(margin, lo_c, hi_c, xtol=1e-12)
    return 1 - c


# -- rates (throughput) -------------------------------------------------------------------------------------------

def compare_rates(count1: int, s1: float, count2: int, s2: float, confidence: float = 0.95, tolerance: float = 0.0,
                  name: str = "throughput", higher_is_better: bool = True) -> dict:
    """count1 events in s1 seconds (run a) against count2 in s2 (run b): throughput, by default (higher is better).

    The conditional test of two Poisson rates: given N = count1 + count2, count2 ~ Binomial(N, pi(rho)) with
    pi(rho) = s2 rho / (s1 + s2 rho) and rho = rate b / rate a. "Fell": an exact binomial test (one-sided) rejects
    rho >= 1 - tolerance at p <= alpha (doubled: two-sided); "rose" mirrored with 1 + tolerance. The ratio's
    interval is the exact (Clopper-Pearson) interval of pi mapped back to rho."""
    alpha, tol = _alpha(confidence), _tol(tolerance)
    ea, eb = rate(count1, s1, confidence), rate(count2, s2, confidence)
    fig = {"figure": name, "kind": "rate", "a": ea.to_dict(), "b": eb.to_dict()}
    total = count1 + count2
    if not s1 or not s2 or s1 <= 0 or s2 <= 0 or total == 0:
        return _not_judged(fig, "a run has no duration, or neither run has events")

    def pi(rho):
        return s2 * rho / (s1 + s2 * rho)

    def rho(p):
        return None if p >= 1 else p / (1 - p) * s1 / s2

    p_up = st.binomtest(count2, total, pi(1 + tol), alternative="greater").pvalue
    p_down = st.binomtest(count2, total, pi(1 - tol), alternative="less").pvalue
    ci = st.binomtest(count2, total).proportion_ci(confidence_level=confidence, method="exact")
    value = None if count1 == 0 else eb.value / ea.value
    fig["ratio"] = Estimate(value, rho(ci.low), rho(ci.high), total, confidence, "exact").to_dict()
    p, verdict = _verdict(float(p_up), float(p_down), alpha, up_is_worse=not higher_is_better)
    return {**fig, "test": "conditional binomial", "p_value": p, "verdict": verdict}


# -- one value a run (recovery times) -----------------------------------------------------------------------------

def compare_values(a, b, confidence: float = 0.95, tolerance: float = 0.0, floor: float = 0.0,
                   name: str = "value", higher_is_worse: bool = True, unit: str = "s") -> dict:
    """One value a run (a recovery time), repeated runs of a against repeated runs of b: Welch's t test on the
    means, as two one-sided tests against the allowed change delta = max(tolerance x mean(a), floor):
    "worse" when mean(b) - mean(a) > delta at p <= alpha (higher_is_worse), "better" mirrored.

    Needs 2 values a side (a variance each). Where both sides repeat one value exactly (no spread), the verdict
    is the sign of the change beyond delta, with p = 1/(2 C(n_a+n_b, n_a)) (the permutation test's resolution),
    not 0: identical repeats show consistency, not certainty. A side's mean has an interval that stays above 0
    (a time cannot be negative), and none with fewer than 3 values."""
    alpha, tol = _alpha(confidence), _tol(tolerance)
    va, vb = np.asarray(a, float), np.asarray(b, float)
    va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
    ea, eb = _mean_estimate(va, confidence), _mean_estimate(vb, confidence)
    fig = {"figure": name, "kind": "value", "unit": unit, "a": ea.to_dict(), "b": eb.to_dict(),
           "values": {"a": [float(x) for x in va], "b": [float(x) for x in vb]}}
    if va.size < 2 or vb.size < 2:
        return {**_not_judged(fig, f"needs 2 runs a side with a value (have {va.size} and {vb.size})"),
                "needs_runs": 2}
    delta = max(tol * float(va.mean()), floor)
    d = float(vb.mean() - va.mean())
    sa2, sb2 = va.var(ddof=1) / va.size, vb.var(ddof=1) / vb.size
    se = math.sqrt(sa2 + sb2)
    if se == 0:
        p_min = 1 / (2 * math.comb(va.size + vb.size, va.size))
        p_up = p_min if d > delta else 1.0
        p_down = p_min if d < -delta else 1.0
        test = "no spread: permutation resolution"
    else:
        df = (sa2 + sb2) ** 2 / ((sa2 ** 2 / (va.size - 1) if va.size > 1 else 0) +
                                 (sb2 ** 2 / (vb.size - 1) if vb.size > 1 else 0))
        p_up = float(st.t.sf((d - delta) / se, df))
        p_down = float(st.t.cdf((d + delta) / se, df))
        test = "welch"
    p, verdict = _verdict(p_up, p_down, alpha, up_is_worse=higher_is_worse)
    return {**fig, "test": test, "allowed_change": delta,
            "difference": Estimate(d, None, None, min(va.size, vb.size), confidence, "mean").to_dict(),
            "p_value": p, "verdict": verdict}


def _mean_estimate(v: np.ndarray, confidence: float) -> Estimate:
    """The mean of a time, with an interval that stays above 0 (chaos.verify.paired.positive_mean_interval):
    log-normal (Cox) where every value is above 0, Student's t held at 0 otherwise, none under 3 values."""
    if v.size == 0:
        return Estimate(None, None, None, 0, confidence, "mean")
    m, lo, hi, method = positive_mean_interval(v, confidence)
    return Estimate(m, lo, hi, int(v.size), confidence, method, needs=3 if lo is None else None)


# -- a family of figures ------------------------------------------------------------------------------------------

def holm(pvalues) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values, in the given order (None passes through and does not count).
    Rejecting where adjusted <= alpha keeps the chance of any false alarm in the family <= alpha."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def compare_figures(figures: list[dict], confidence: float = 0.95) -> list[dict]:
    """The verdicts of many figure comparisons, corrected together (Holm).

    Why: each comparison alone says "changed" at p <= 0.05 one time in 20 when nothing changed. Compare 20
    figures (TTFT, ITL, E2E at three percentiles, error rate, throughput, per phase...) and some figure is
    flagged by chance in most runs (1 - 0.95^20 = 64 % if they were independent). Holm's step-down method keeps
    the chance of any false flag in the whole family at alpha, and loses less power than Bonferroni.

    Returns copies with "p_unadjusted", "p_holm", "verdict_unadjusted" and "verdict" after the correction
    (a change stands only where p_holm <= alpha); "not judged" figures stay as they are and do not count in m."""
    alpha = _alpha(confidence)
    adjusted = holm([f.get("p_value") for f in figures])
    out = []
    for f, adj in zip(figures, adjusted):
        g = {**f, "p_unadjusted": f.get("p_value"), "p_holm": adj, "verdict_unadjusted": f["verdict"]}
        if adj is not None and adj > alpha and f["verdict"] in (WORSE, BETTER):
            g["verdict"] = SAME
        out.append(g)
    return out
