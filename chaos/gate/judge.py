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

    The pairs a figure is judged on: those whose two runs saw the same host, when there are min_pairs of them.
    Fewer, and the figure is judged on every pair (the coins hold whatever the host did), but a "worse" found
    there is not called: it is not judged, for the host (the gate exits 4 and names the pairs). Nor is one whose
    judged pairs' candidate runs saw, on average, more of others' CPU than the baseline's by over half the bound:
    pairs within the bound one by one, but all the same way, are a side that differed. A figure on fewer than
    min_pairs pairs in all is not judged, and says why."""
    alpha, k = 1 - confidence, min_pairs(confidence)
    use, noisy = [], []
    for f in figs:
        host = set((f.get("excluded") or {}).get("host") or {})
        clean = [p for p in f["pairs"] if p not in host]
        use.append(clean if len(clean) >= k else f["pairs"] if len(f["pairs"]) >= k else None)
        noisy.append(len(clean) < k and bool(host))

    def on(i, key):
        keep = set(use[i])
        values = figs[i].get(key) or figs[i]["d"]  # z: the scale the t test reads; latency's d is a log already
        return np.asarray([v for p, v in zip(figs[i]["pairs"], values) if p in keep], float)

    ts = {i: paired_t(on(i, "z")) for i in range(len(figs)) if use[i] is not None}
    two_sided = [min(1.0, 2 * min(ts[i])) if i in ts else None for i in range(len(figs))]
    holm = C.holm(two_sided)
    out = []
    for i, f in enumerate(figs):
        f = {**f, "test": "paired t (Holm) and sign-flip beyond the tolerance", "pairs_needed": k}
        if use[i] is None:
            out.append(_short(f, k))
            continue
        if "va" in f:
            f.update(estimates(f, use[i], confidence), judged_on=use[i])
        up = ts[i][0] <= ts[i][1]
        d = on(i, "d")
        pw = max(holm[i] if up else 1.0, flip_p(d - f["allowed"], seed))
        pb = max(holm[i] if not up else 1.0, flip_p(-d - f["allowed"], seed))
        verdict = C.WORSE if pw <= alpha else C.BETTER if pb <= alpha else C.SAME
        f.update(p_changed=two_sided[i], p_holm=holm[i], p_worse=pw, p_better=pb, p_value=min(pw, pb),
                 verdict=verdict)
        side = _side_gap(f, use[i])
        if noisy[i]:
            host = f["excluded"]["host"]
            why_host = "; ".join(f"{n}: {w}" for n, w in sorted(host.items()))
            pairs_text = f"{', '.join(map(str, sorted(host)))} ({why_host})"
            if verdict == C.WORSE:
                f.update(verdict=C.NOT_JUDGED, host=True, p_value=None, p_held=pw,
                         why=f"worse on every pair (p = {pw:.2g}), but the host differed in pair(s) {pairs_text}, "
                             f"and without them {len(f['pairs']) - len(host)} pair(s) are too few to judge ({k} "
                             f"needed): not called on that evidence")
            else:
                f["host_note"] = (f"judged on every pair, pair(s) {', '.join(map(str, sorted(host)))} with a "
                                  f"different host included (too few without them)")
        elif verdict == C.WORSE and host_bound and side is not None and side > SIDE_SHARE * host_bound:
            f.update(verdict=C.NOT_JUDGED, host=True, p_value=None, p_held=pw,
                     why=f"worse (p = {pw:.2g}), but the host differed between the sides: the candidate's runs saw "
                         f"{side:.2f} cores more of others' CPU than the baseline's, on average over the pairs "
                         f"judged (over half the bound, {SIDE_SHARE * host_bound:.2f}): not called on that evidence")
        out.append(f)
    return out


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
        why = (f"a {f['metric'].split()[-1].upper()} needs {ex.get('needs_samples')} requests a run in this phase; "
               f"pair(s) {', '.join(map(str, ex['samples']))} had fewer: {have} pair(s) left, {k} needed "
               f"(longer runs, or fewer percentiles)")
        return {**f, "verdict": C.NOT_JUDGED, "p_value": None, "why": why, "needs_pairs": k + len(ex["samples"])}
    why = f"{have} pair(s): a randomization test at this confidence needs {k}"
    return {**f, "verdict": C.NOT_JUDGED, "p_value": None, "why": why, "needs_pairs": k + (len(host) if host else 0)}
