"""The rare-error figure: a build that fails 0.5 % of requests where the baseline fails none (docs/gate.md, "What
canary analysis misses"). A phase's error rate cannot see it: a short run has a request or two failing, a pair's
difference of rates is mostly 0, and the error tolerance is a whole point. Pooled over every phase and pair, the
failures are few but all on one side, and an exact test sees that.

The test. Under no change the coins make each failure as likely to have fallen in the candidate's run as in the
baseline's, in proportion to the requests each side sent: given K failures in all, the candidate's X is
Binomial(K, Nb / (Na + Nb)). P(X or more) is an exact p for "it changed", with no normal approximation that 0 of
0 would break. "Beyond the tolerance" is the same test at a rate ratio of 1 + tolerance (the candidate's rate
that much above the baseline's: p = Nb(1+t) / (Na + Nb(1+t))). Both p's enter chaos/gate/judge.py's decision
in place of the t and sign-flip tests (Holm over every figure, as the rest). The interval: Clopper-Pearson on
X / K, turned into the ratio of the rates.

Failures in bursts (a replica killed with four streams open fails four requests at once) are not independent,
and a binomial that counted them one by one would see a burst as strong evidence. So a side counts failure
episodes: failures of one run less than EPISODE_S apart are one. Rare, independent failures (0.5 % of 10
requests a second is one every 20 s) are almost never that close, so the build's errors keep their count.
As in the error-rate figures, in a pair whose host differed the failures a slow host can cause (timeouts, 408,
504) are set aside.
"""

from __future__ import annotations


from scipy.stats import binom, binomtest

from ..records.record import ERROR_OUTCOMES
from ..verify.stats import Estimate
from .figures import GateSettings
from .spans import figure, without_slow_failures

EPISODE_S = 1.0


def episodes(records) -> tuple[int, int]:
    """(failure episodes, requests judged) of a run's records: failures less than EPISODE_S apart count once."""
    judged = [r for r in records if r.outcome != "cancelled"]
    times = sorted(r.t_end if r.t_end is not None else r.t_start for r in judged if r.outcome in ERROR_OUTCOMES)
    count = sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] >= EPISODE_S)
    return count, len(judged)


def exact_ps(x: int, k: int, na: int, nb: int, ratio: float) -> tuple[float, float]:
    """One-sided p's of X = x of k failures on b's side: (b's rate above ratio x a's, b's below a's / ratio)."""
    if k == 0 or na == 0 or nb == 0:
        return 1.0, 1.0
    up, down = ratio * nb / (na + ratio * nb), nb / (na * ratio + nb)
    return float(binom.sf(x - 1, k, up)), float(binom.cdf(x, k, down))


def _rate(k: int, n: int, confidence: float) -> dict:
    ci = binomtest(k, n).proportion_ci(confidence, method="exact") if n else None
    return Estimate(k / n if n else None, ci.low if ci else None, ci.high if ci else None, n, confidence,
                    "Clopper-Pearson").to_dict()


def rare_error_figure(exp: str, pairs: list, s: GateSettings) -> dict:
    used, d, set_aside = [], [], {}
    na = nb = ea = eb = 0
    for p in pairs:
        host = p.host_differs(None, s.host_bound)
        counts = [episodes(without_slow_failures(run.records, host, set_aside, p.number)) for run in (p.a, p.b)]
        (fa, ja), (fb, jb) = counts
        if ja and jb:
            used.append(p.number)
            d.append(fb / jb - fa / ja)
            na, nb, ea, eb = na + ja, nb + jb, ea + fa, eb + fb
    k = ea + eb
    changed = exact_ps(eb, k, na, nb, 1.0)
    beyond = exact_ps(eb, k, na, nb, 1.0 + s.tolerance)
    fig = figure(exp, "every phase", "rare errors (failure episodes, exact)", "proportion", pairs=used, d=d,
                  allowed=0.0, tolerance=s.tolerance, exact={"changed": changed, "beyond": beyond,
                                                             "failures": {"a": ea, "b": eb}},
                  excluded={"host": {}, "set_aside": {n: v for n, v in set_aside.items() if v}})
    if na and nb:
        fig.update(a=_rate(ea, na, s.confidence), b=_rate(eb, nb, s.confidence),
                   difference=Estimate(eb / nb - ea / na, None, None, len(used), s.confidence,
                                       "pooled rates").to_dict())
        if k:
            ci = binomtest(eb, k).proportion_ci(s.confidence, method="exact")
            # b's rate over a's: no upper bound (None) while the baseline's side has no failure
            to_ratio = lambda q: None if q >= 1 else q / (1 - q) * na / nb  # noqa: E731
            rr = Estimate(to_ratio(eb / k), to_ratio(ci.low), to_ratio(ci.high), k, s.confidence,
                          "Clopper-Pearson on the candidate's share of the failures").to_dict()
            fig["rate_ratio"] = rr
            if rr["value"] is not None and rr["high"] is not None:
                fig["ratio"] = rr
    return fig
