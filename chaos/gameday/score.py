"""A game day's resilience score and each experiment's key figures (what the history keeps and the trend plots).

Resilience score (0-100), docs/gameday.md:
    each experiment scores 100 x (checks passed) / (checks judged); a check the run could not judge counts for
    neither side; an experiment that did not run to a report (a setup error, interrupted, not run) scores 0, and so
    does one aborted by abort_when (the service got so bad the run had to stop);
    the game day's score is the mean over the suite's experiments.
It is a summary for a trend, not a verdict: the verdicts are each experiment's checks.
"""

from __future__ import annotations

from ..suite.execute import FAILED, INCONCLUSIVE, PASSED

RAN = (PASSED, FAILED, INCONCLUSIVE)


def experiment_score(exit_code: int | None, report: dict) -> float:
    if exit_code not in RAN:  # a setup error, aborted, interrupted, not run
        return 0.0
    checks = [c for c in report.get("checks") or [] if c.get("passed") is not None]
    if not checks:
        return 0.0 if exit_code == FAILED else 100.0
    return 100.0 * sum(bool(c["passed"]) for c in checks) / len(checks)


def resilience_score(scores: list[float]) -> float | None:
    return round(sum(scores) / len(scores), 1) if scores else None


def _phase(report: dict, kind: str) -> dict | None:
    return next((p for p in report.get("phases") or [] if p.get("kind") == kind), None)


def key_figures(experiment: str, report: dict) -> list[dict]:
    """E2E and TTFT P99 and goodput (the share of requests that met the SLO, Wilson; where the run had SLO bounds)
    in the steady state and during the first fault (with their intervals), the run's four recovery figures, and
    the error budget spent (failed share of the requests in the faults' spans, Wilson)."""
    out = []

    def add(figure, est, unit="s"):
        if est and est.get("value") is not None:
            out.append({"experiment": experiment, "figure": figure, "value": est["value"], "low": est.get("low"),
                        "high": est.get("high"), "n": est.get("n"), "unit": unit})

    for kind, label in (("steady", "steady state"), ("fault", "during the fault"), ("run", "whole run")):
        ph = _phase(report, kind)
        if ph:
            add(f"E2E P99, {label}", (ph.get("e2e") or {}).get("p99"))
            add(f"TTFT P99, {label}", (ph.get("ttft") or {}).get("p99"))
            add(f"goodput, {label}", ph.get("goodput"), unit="fraction")
    run = (report.get("recovery") or {}).get("run") or {}
    for key, label in (("time_to_detect", "time to detect"), ("time_to_failover", "time to failover"),
                       ("time_to_restore", "time to restore")):
        add(label, run.get(key))
    budget = run.get("error_budget") or {}
    if budget.get("requests"):
        from ..verify.stats import proportion

        add("error budget spent", proportion(int(budget.get("failed_requests") or 0),
                                             int(budget["requests"])).to_dict(), unit="fraction")
    return out
