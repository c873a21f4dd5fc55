"""The gate's decision from its judged figures: the exit code, the verdict and the reason a user reads, with what
to do where the gate could not decide (the host differed, too few pairs or samples)."""

from __future__ import annotations

import os

from ..errors import InputError
from ..suite.execute import ABORTED, FAILED, INCONCLUSIVE, PASSED, Outcome
from ..verify import compare as C
from ..verify.paired import min_pairs

PASS, REGRESSION, SETUP_ERROR, INCONCLUSIVE_EXIT = 0, 1, 2, 4
RAN = (PASSED, FAILED, ABORTED, INCONCLUSIVE)  # runs with records to compare


class GateError(InputError):
    pass


def decide_setup(out: Outcome) -> dict:
    return {"exit_code": SETUP_ERROR, "verdict": "setup error",
            "reason": f"{out.name}: a run could not start ({out.error or 'see ' + out.run_dir + '.log'}); "
                      f"nothing was compared", "figures": []}


def settle_empty(f: dict) -> dict:
    """Nothing on either side (no failed request in both) is no change, not a figure left unjudged."""
    if f["verdict"] == C.NOT_JUDGED and f.get("kind") == "rate" and "neither run has events" in f.get("why", ""):
        return {**f, "verdict": C.SAME, "why": "no failed request on either side"}
    return f


def decide(figs: list[dict], s, plan, runs: list[dict] = ()) -> dict:
    """The gate's decision from its judged figures: 1 for a regression the host cannot explain, 4 where figures
    could not be judged (the host differed, or too few pairs or samples), else 0."""
    worse = [f for f in figs if f["verdict"] == C.WORSE]
    judged = [f for f in figs if f["verdict"] != C.NOT_JUDGED]
    held = [f for f in figs if f["verdict"] == C.NOT_JUDGED and f.get("host")]
    short = [f for f in figs if f["verdict"] == C.NOT_JUDGED and not f.get("host")
             and (f.get("needs_runs") or f.get("needs_pairs"))]
    score = round(100 * sum(f["verdict"] != C.WORSE for f in judged) / len(judged), 1) if judged else None
    base = {"figures": figs, "score": score, "regressed": [f["figure"] for f in worse],
            "judged": len(judged), "not_judged": len(figs) - len(judged)}
    if worse:
        return {**base, "exit_code": REGRESSION, "verdict": "regression",
                "reason": f"{len(worse)} figure(s) worse beyond the tolerance and the noise"
                          + (", on pairs the host cannot explain" if plan.interleaved else "")}
    if held:
        more = plan.pairs + max(len((f.get("excluded") or {}).get("host") or {}) for f in held)
        return {**base, "exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "host_differed": True,
                "needs_pairs": more,
                "reason": f"no regression found, but the host differed between the runs compared, so "
                          f"{len(held)} latency or recovery-time figure(s) were not judged on that evidence "
                          f"({host_text(held, runs)}). Rerun when the runner is quieter, give more pairs "
                          f"({plan.pairs_option} {more}) so that enough of them see the same host, or move to a quieter "
                          f"runner; `chaos gate --aa` measures a runner"}
    if not judged or short:
        return {**base, **_short(short, plan)}
    return {**base, "exit_code": PASS, "verdict": "pass",
            "reason": f"no figure worse beyond the tolerance and the noise ({len(judged)} judged)"}


def host_text(held: list[dict], runs: list[dict]) -> str:
    """The pairs (or sides) whose hosts differed, with the runs and their figures."""
    pairs = sorted({(f["experiment"], n) for f in held for n in ((f.get("excluded") or {}).get("host") or {})})
    if not pairs:  # recorded baseline: the sides differed
        return "; ".join(sorted({f["why"] for f in held}))[:600]
    parts = []
    for exp, n in pairs[:6]:
        rows = {r["side"]: r for r in runs if r["name"] == exp and r.get("pair") == n}
        parts.append(f"{exp} pair {n}: {_run_host(rows, 'a')}, {_run_host(rows, 'b')}")
    return "; ".join(parts) + (f"; and {len(pairs) - 6} more" if len(pairs) > 6 else "")


def _run_host(rows: dict, side: str) -> str:
    """'baseline a-2 others 0.02 cores'"""
    row = rows.get(side) or {}
    others = (row.get("host") or {}).get("others")
    name = os.path.basename(row["run_dir"]) if row else "?"
    return (f"{'baseline' if side == 'a' else 'candidate'} {name}"
            + (f" others {others:.2f} cores" if others is not None else ""))


def _short(short: list[dict], plan) -> dict:
    if plan.interleaved:
        need = max([f.get("needs_pairs") or 0 for f in short] + [plan.pairs + 1, min_pairs(0.95)])
        return {"exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "needs_pairs": need,
                "reason": f"no regression found, but {len(short)} figure(s) could not be judged: "
                          f"{(short[0]['why'] if short else 'nothing judged')}; give {plan.pairs_option} {need}, longer runs "
                          f"or fewer percentiles (--percentiles)"}
    need = max([f.get("needs_runs") or 0 for f in short] or [plan.pairs + 1])
    if any(f.get("short_side") == "a" for f in short):
        how = (f"the recorded baseline has too few: record at least {need} baseline runs of each experiment "
               f"(a game day, or a gate with --pairs {need}), or give --baseline-target")
    else:
        need = max(need, plan.pairs + 1)
        how = f"{need - plan.pairs} more candidate run(s) (--pairs {need}), or fewer percentiles (--percentiles)"
    return {"exit_code": INCONCLUSIVE_EXIT, "verdict": "inconclusive", "needs_runs": need,
            "reason": f"no regression found, but {len(short)} figure(s) had too few samples to judge: {how}"}
