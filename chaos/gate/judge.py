"""The gate's decision on its paired figures (chaos/gate/pairs.py builds them): which are worse, better, unchanged
or not judged, and why. chaos/verify/paired.py has the tests and why they hold; docs/gate.md says it for users."""

from __future__ import annotations

import numpy as np

from ..verify import compare as C
from ..verify.paired import flip_p, min_pairs, paired_t
from .pairs import estimates


# The sides of the pairs a figure is judged on may each differ by up to the bound, always the same way; where the
# candidate's runs saw on average more than this share of the bound beyond the baseline's, a "worse" is held.
SIDE_SHARE = 0.5


def judge(figs: list[dict], confidence: float, seed: int = 0, host_bound: float | None = None) -> list[dict]:
    """Every paired figure of a gate judged together. A figure is "worse" when both hold at alpha:
      - it changed, upward: Student's t on its pairs' changes z (logs: near normal), Holm-corrected over every
        figure of the gate (a no-change gate calls nothing in all but alpha of gates);
      - it changed by more than the allowed change: its own sign-flip test of d less the allowed change.
    p_value is the larger of the two, so "worse" <=> p_value <= alpha; "better" mirrored.

    The pairs a direction is judged on. A host that differed can only push a pair's change its own way: a busier
    candidate run makes the candidate look worse, a busier baseline run makes it look better. So "worse" is judged
    on the pairs whose candidate run was not the busier beyond the bound (a busier baseline only hides a
    regression), "better" on those whose baseline run was not, when there are min_pairs of them. Fewer, and that
    direction is judged on every pair (the coins hold whatever the host did), but a "worse" found there is not
    called: it is not judged, for the host (the gate exits 4 and names the pairs). Nor is one whose pairs'
    candidate runs saw, on average, more of others' CPU than the baseline's by over half the bound: pairs within
    the bound one by one, but all the same way, are a side that differed. A figure on fewer than min_pairs pairs in
    all is not judged, and says why."""
    alpha, k = 1 - confidence, min_pairs(confidence)
    sets = [_sets(f, k) for f in figs]

    def on(i, key, pairs):
        keep = set(pairs)
        values = figs[i].get(key) or figs[i]["d"]  # z: the scale the t test reads; latency's d is a log already
        return np.asarray([v for p, v in zip(figs[i]["pairs"], values) if p in keep], float)

    def changed(i, up, down):
        exact = figs[i].get("exact")  # a sparse count's exact test (chaos/gate/rare.py) stands in for t
        return tuple(exact["changed"]) if exact else (paired_t(on(i, "z", up))[0], paired_t(on(i, "z", down))[1])

    def beyond(i, pairs, sign):
        exact = figs[i].get("exact")
        if exact:
            return exact["beyond"][0 if sign > 0 else 1]
        return flip_p(sign * on(i, "d", pairs) - figs[i]["allowed"], seed)

    ts = {i: changed(i, up, down) for i, (up, down, _, _) in enumerate(sets) if up is not None}
    two_sided = [min(1.0, 2 * min(ts[i])) if i in ts else None for i in range(len(figs))]
    holm = C.holm(two_sided)
    out = []
    for i, f in enumerate(figs):
        f = {**f, "test": "paired t (Holm) and sign-flip beyond the tolerance", "pairs_needed": k}
        up_set, down_set, noisy_up, _ = sets[i]
        if up_set is None:
            out.append(_short(f, k))
            continue
        rising = ts[i][0] <= ts[i][1]
        pw = max(holm[i] if rising else 1.0, beyond(i, up_set, 1))
        pb = max(holm[i] if not rising else 1.0, beyond(i, down_set, -1))
        verdict = C.WORSE if pw <= alpha else C.BETTER if pb <= alpha else C.SAME
        judged_on = down_set if verdict == C.BETTER else up_set
        if "va" in f:
            f.update(estimates(f, judged_on, confidence), judged_on=judged_on)
        f.update(p_changed=two_sided[i], p_holm=holm[i], p_worse=pw, p_better=pb, p_value=min(pw, pb),
                 verdict=verdict)
        host = (f.get("excluded") or {}).get("host") or {}
        side = _side_gap(f, up_set)
        if verdict == C.WORSE and noisy_up:
            busier = {n: w for n, w in host.items() if n in up_set}
            why_host = "; ".join(f"{n}: {w}" for n, w in sorted(busier.items()))
            f.update(verdict=C.NOT_JUDGED, host=True, p_value=None, p_held=pw,
                     why=f"worse on every pair (p = {pw:.2g}), but the candidate's run was the busier in pair(s) "
                         f"{', '.join(map(str, sorted(busier)))} ({why_host}), and without them "
                         f"{len(up_set) - len(busier)} pair(s) are too few to judge ({k} needed): not called on "
                         f"that evidence")
        elif verdict == C.WORSE and host_bound and side is not None and side > SIDE_SHARE * host_bound:
            f.update(verdict=C.NOT_JUDGED, host=True, p_value=None, p_held=pw,
                     why=f"worse (p = {pw:.2g}), but the host differed between the sides: the candidate's runs saw "
                         f"{side:.2f} cores more of others' CPU than the baseline's, on average over the pairs "
                         f"judged (over half the bound, {SIDE_SHARE * host_bound:.2f}): not called on that evidence")
        elif host and any(n in judged_on for n in host):
            why = ("too few without them" if noisy_up else
                   "the baseline's run the busier: that can only hide a regression, not make one")
            f["host_note"] = (f"pair(s) {', '.join(str(n) for n in sorted(host) if n in judged_on)} with a different "
                              f"host judged too ({why})")
        out.append(f)
    return out


def _sets(f: dict, k: int):
    """(pairs for "worse", pairs for "better", whether "worse" had to take every pair, the same for "better");
    (None, None, ...) when the figure has fewer than k pairs in all."""
    if len(f["pairs"]) < k:
        return None, None, False, False
    host = (f.get("excluded") or {}).get("host") or {}
    gap = dict(zip(f["pairs"], f.get("gap") or [None] * len(f["pairs"])))
    b_busier = {n for n in host if (gap.get(n) or 0) > 0}
    a_busier = set(host) - b_busier
    up = [p for p in f["pairs"] if p not in b_busier]
    down = [p for p in f["pairs"] if p not in a_busier]
    noisy_up, noisy_down = len(up) < k, len(down) < k
    return (f["pairs"] if noisy_up else up), (f["pairs"] if noisy_down else down), noisy_up, noisy_down


def _side_gap(f: dict, keep: list[int]) -> float | None:
    gaps = [g for p, g in zip(f["pairs"], f.get("gap") or []) if p in keep and g is not None]
    return float(np.mean(gaps)) if gaps else None


def _short(f: dict, k: int) -> dict:
    """Not judged: on fewer than k pairs in all, and why they are missing."""
    ex = f.get("excluded") or {}
    have = len(f["pairs"])
    host = ex.get("host") or {}
    if ex.get("unseen"):  # no client saw the fault there: nothing to time, and more pairs would not change that
        why = (f"no client saw the fault in pair(s) {', '.join(map(str, ex['unseen']))}: detection is not timed "
               f"there ({have} pair(s) timed it, {k} needed)")
        return {**f, "verdict": C.NOT_JUDGED, "p_value": None, "why": why}
    if ex.get("samples"):
        what = "this figure" if ex.get("samples_are") else f"a {f['metric'].split()[-1].upper()}"
        why = (f"{what} needs {ex.get('needs_samples')} {ex.get('samples_are') or 'requests'} a run in this phase; "
               f"pair(s) {', '.join(map(str, ex['samples']))} had fewer: {have} pair(s) left, {k} needed "
               f"(longer runs, or fewer percentiles)")
        return {**f, "verdict": C.NOT_JUDGED, "p_value": None, "why": why, "needs_pairs": k + len(ex["samples"])}
    why = f"{have} pair(s): a randomization test at this confidence needs {k}"
    return {**f, "verdict": C.NOT_JUDGED, "p_value": None, "why": why, "needs_pairs": k + (len(host) if host else 0)}
