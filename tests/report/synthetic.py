"""A small synthetic run for the report tests: requests.jsonl, metrics.jsonl and a report dict with every section
(three load steps, one fault window with errors of several classes and proxy fault labels, phases with
Estimates, recovery, stability, diagnosis, advice, server metrics), written into a directory."""

from __future__ import annotations

import json
import os

import numpy as np

from chaos.records import RequestRecord

T0 = 1_800_000_000.0  # the load's start (epoch seconds)
STEPS = (("users=4", 4), ("users=8", 8), ("users=16", 16))
STEP_S = 20.0
FAULT = (25.0, 35.0)  # seconds after T0


def estimate(value, low=None, high=None, n=0, method="order-statistic", needs=None) -> dict:
    return {"value": value, "low": low, "high": high, "n": n, "confidence": 0.95, "method": method, "needs": needs}


def records(seed: int = 1) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for k, (step, users) in enumerate(STEPS):
        rate = 4.0 * users
        n = int(rate * STEP_S)
        starts = np.sort(rng.uniform(k * STEP_S, (k + 1) * STEP_S, n))
        for i, s in enumerate(starts):
            in_fault = FAULT[0] <= s < FAULT[1]
            ttft = rng.lognormal(np.log(0.04 + 0.004 * users), 0.3) * (4 if in_fault else 1)
            e2e = ttft + rng.lognormal(np.log(0.2 + 0.02 * users), 0.2)
            outcome, status, fault, t_first = "ok", 200, None, T0 + s + ttft
            if in_fault and i % 5 == 0:
                outcome, status, t_first = ("timeout", None, None) if i % 3 else ("http_error", 503, None)
                fault = "slow-r1; delay" if i % 3 else "errors-r1; status 503"
            elif in_fault and i % 7 == 0:
                outcome, status, t_first, fault = "reset", None, None, "drop-r1; reset; conn closed, mid-stream"
            elif in_fault and i % 4 == 0:
                fault = "slow-r1; delay"
            out.append(RequestRecord(
                id=f"{step}-{i}", case="chat", endpoint="chat", stream=True, t_sched=T0 + s, t_start=T0 + s,
                t_first=t_first, t_end=T0 + s + e2e, status=status, outcome=outcome, output_tokens=16,
                requested_tokens=16, fixed_output=True, step=step, fault=fault, served_by="r0" if i % 2 else "r1"))
    last = out[-1]
    out.append(RequestRecord(id="cancelled", case="chat", endpoint="chat", stream=True, t_sched=last.t_start,
                             t_start=last.t_start, t_end=last.t_start + 0.1, outcome="cancelled", step=STEPS[-1][0]))
    return out


def metrics_lines(seed: int = 2) -> list[dict]:
    rng = np.random.default_rng(seed)
    lines = []
    for t in np.arange(0, STEP_S * len(STEPS), 1.0):
        users = STEPS[min(int(t // STEP_S), len(STEPS) - 1)][1]
        for inst in ("r0", "r1"):
            down = inst == "r1" and FAULT[0] <= t < FAULT[1]
            lines.append({"t": T0 + t, "instance": inst, "ok": not down, "values": {} if down else {
                "running": float(users // 2 + rng.integers(0, 2)), "waiting": float(max(0, users - 8)),
                "kv_usage": min(1.0, 0.05 * users + rng.uniform(0, 0.05)), "preemptions_total": float(t // 10)}})
    return lines


def report(server_metrics: dict | None = None) -> dict:
    from chaos.records.summary import summarize_steps

    recs = records()
    steps = summarize_steps(recs, [s for s, _ in STEPS], False, {s: STEP_S for s, _ in STEPS})

    def lat(v):
        return {"p50": estimate(v, v * 0.95, v * 1.05, 300), "p95": estimate(v * 1.5, v * 1.4, v * 1.7, 300),
                "p99": estimate(v * 2, None, None, 40, needs=459)}

    phase = lambda name, kind, a, b, v, er: {  # noqa: E731
        "name": name, "kind": kind, "start": T0 + a, "end": T0 + b, "requests": 300, "ttft": lat(v / 5),
        "itl": lat(v / 20), "e2e": lat(v), "error_rate": estimate(er, max(0, er - 0.01), er + 0.02, 300, "wilson"),
        "throughput": estimate(30.0, 28.0, 32.0, 300, "poisson"), "jitter": estimate(1.9, 1.7, 2.2, 300,
                                                                                      "bootstrap")}
    moment = lambda v, ev: {"value": v, "at": None if v is None else T0 + FAULT[0] + v, "evidence": ev}  # noqa: E731
    fault_recovery = {"fault": "slow-r1", "type": "llm_proxy", "start": T0 + FAULT[0], "end": T0 + FAULT[1],
                      "instances": ["r1"], "time_to_detect": moment(0.4, "a timeout ended at +25.4s"),
                      "time_to_failover": moment(None, "the last 5 s window still had 12% errors"),
                      "time_to_restore": moment(11.2, "r1 served again at +36.2s"),
                      "error_budget": {"failed_requests": 57, "failed_request_seconds": 41.5, "slow_requests": 80,
                                       "evidence": "from +25.0s to +35.0s"}}
    return {
        "report_version": 2,
        "experiment": {"name": "synthetic <demo>", "description": "A synthetic run: three steps, one fault.",
                       "file": "x.yaml"},
        "verdict": "failed", "exit_code": 1, "reason": "error rate during the fault: 19.5% > 10%",
        "started": T0 - 5, "duration_s": 70.0, "load_started": T0,
        "target": {"kind": "reference", "name": "demo", "model": "tiny", "instances": [{"id": "r0"}, {"id": "r1"}]},
        "checks": [
            {"name": "error rate during the fault", "passed": False, "status": "failed", "measured": "19.5%",
             "threshold": "<= 10%", "detail": "200 requests in the window"},
            {"name": "status codes", "passed": True, "status": "passed", "measured": "200x900", "threshold": "[200]",
             "detail": ""},
            {"name": "recovery time", "passed": None, "status": "not_judged", "measured": "-", "threshold": "<= 10 s",
             "detail": "not judged: the box was too busy"}],
        "steps": [s.to_dict() for s in steps],
        "faults": [{"name": "slow-r1", "type": "llm_proxy", "description": "delay and errors on r1", "applied": True,
                    "reverted": True, "applied_at": T0 + FAULT[0], "reverted_at": T0 + FAULT[1], "apply_error": None,
                    "revert_error": None},
                   {"name": "never-reverted", "type": "pause_instance", "description": "pause r0", "applied": True,
                    "reverted": False, "applied_at": T0 + 55, "reverted_at": None, "apply_error": None,
                    "revert_error": "r0: no such process"}],
        "notes": ["a note with <b>markup</b> that must show as text"],
        "inputs": [], "requests": len(recs),
        "timeline": [{"t": T0 - 5, "event": "run_started", "experiment": "synthetic"},
                     {"t": T0 - 1, "event": "process_started", "restart": False, "instance": {"id": "r0"}},
                     {"t": T0, "event": "load_started", "plan": "steps"},
                     {"t": T0 + 20, "event": "steady_state_ok", "detail": "p95 503 ms"},
                     {"t": T0 + FAULT[0] - 0.01, "event": "fault_applying", "fault": "slow-r1"},
                     {"t": T0 + FAULT[0], "event": "fault_applied", "fault": "slow-r1"},
                     {"t": T0 + FAULT[1] - 0.2, "event": "fault_reverting", "fault": "slow-r1"},
                     {"t": T0 + FAULT[1] - 0.1, "event": "process_started", "restart": True, "instance": {"id": "r1"}},
                     {"t": T0 + FAULT[1], "event": "fault_reverted", "fault": "slow-r1"},
                     {"t": T0 + 55, "event": "fault_applied", "fault": "never-reverted"},
                     {"t": T0 + 60.5, "event": "load_stopped", "records": len(recs)},
                     {"t": T0 + 61, "event": "run_finished", "verdict": "failed"}],
        "phases": [phase("steady state", "steady", 15, 25, 0.3, 0.0), phase("slow-r1", "fault", 25, 35, 0.9, 0.195),
                   phase("after recovery", "after", 35, 60, 0.35, 0.002)],
        "recovery": {"faults": [fault_recovery], "run": {k: v for k, v in fault_recovery.items()
                                                         if k.startswith(("time_", "error_"))}},
        "stability": {"json_valid": estimate(0.97, 0.93, 0.99, 120, "wilson"), "drift": {"tokens_per_s": 1.2}},
        "diagnosis": [{"cause": "batching / queueing limit", "evidence": ["E2E P95 300 ms at 4 users -> 900 ms at "
                                                                          "16 users (3.0x)"],
                       "advice": "cap concurrency below the knee"}],
        "advice": {"timeout": {**estimate(1.35, 1.2, 1.5, 300), "rule": "1.5 x the steady state's E2E P99"},
                   "retries": {"max_retries": 2, "backoff": "exponential, with jitter",
                               "retry_budget": "at most 10% extra requests"},
                   "concurrency_cap": {"value": 6, "capacity": 8, "rule": "capacity minus 20%"}},
        "server_metrics": server_metrics,
    }


def write_run(run_dir: str, with_metrics: bool = True) -> dict:
    """requests.jsonl (+ metrics.jsonl) into run_dir; returns the report dict (its server_metrics null: the
    renderer reads metrics.jsonl)."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "requests.jsonl"), "w") as f:
        f.writelines(r.to_json() + "\n" for r in records())
    if with_metrics:
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in metrics_lines())
    return report()
