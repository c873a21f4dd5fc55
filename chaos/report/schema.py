"""The published JSON Schema of report.json (version 2): `chaos schema report`. Tests validate real runs' reports
against it, so it cannot drift from what the runner writes. Sections a run could not produce are null or absent;
keys beyond these are allowed (a newer writer's), so a reader built on version 2 keeps working."""

from __future__ import annotations

NUM = {"type": ["number", "null"]}
ESTIMATE = {
    "type": ["object", "null"],
    "description": "a figure with its noise: value, the interval [low, high] at `confidence` (null when n is too "
                   "small: `needs` is the n it would take), the samples it rests on, and how it was computed",
    "required": ["value", "low", "high", "n"],
    "properties": {"value": NUM, "low": NUM, "high": NUM, "n": {"type": "integer", "minimum": 0},
                   "confidence": NUM, "method": {"type": ["string", "null"]},
                   "needs": {"type": ["integer", "null"]}},
}
TRIPLE = {"type": "object", "properties": {k: ESTIMATE for k in ("p50", "p95", "p99")}}
FIGURE = {"type": "object", "required": ["value", "at", "evidence"],
          "description": "seconds from the fault (null: never), the moment on the records' clock, and what shows it",
          "properties": {"value": NUM, "at": NUM, "evidence": {"type": "string"}, "resolution_s": NUM}}
BUDGET = {"type": "object", "required": ["failed_requests", "failed_request_seconds"],
          "properties": {"failed_requests": {"type": "integer"}, "failed_request_seconds": {"type": "number"},
                         "slow_requests": {"type": "integer"}, "requests": {"type": "integer"}}}
FOUR = {"time_to_detect": FIGURE, "time_to_failover": FIGURE, "time_to_restore": FIGURE, "error_budget": BUDGET}
CHECK = {"type": "object", "required": ["name", "passed", "measured", "threshold", "detail", "status"],
         "properties": {"name": {"type": "string"}, "passed": {"type": ["boolean", "null"]},
                        "measured": {"type": "string"}, "threshold": {"type": "string"},
                        "detail": {"type": "string"},
                        "status": {"enum": ["passed", "failed", "not_judged"]}}}
PHASE = {"type": "object", "required": ["name", "kind", "start", "end", "requests"],
         "properties": {"name": {"type": "string"}, "kind": {"enum": ["steady", "fault", "after", "run"]},
                        "start": {"type": "number"}, "end": {"type": "number"}, "requests": {"type": "integer"},
                        "ttft": TRIPLE, "itl": TRIPLE, "e2e": TRIPLE, "error_rate": ESTIMATE,
                        "goodput": {**ESTIMATE, "description": "the share of the phase's requests (not cancelled) "
                                    "that met analysis.goodput's bounds, Wilson; `good` counts them; null: no "
                                    "bounds", "properties": {**ESTIMATE["properties"],
                                                             "good": {"type": "integer", "minimum": 0}}},
                        "throughput": ESTIMATE, "jitter": ESTIMATE}}

HOST = {"type": ["object", "null"],
        "description": "a span's host (chaos.host): means over its samples; others, own and steal in cores",
        "required": ["samples", "others"],
        "properties": {"samples": {"type": "integer", "minimum": 0}, "ncpu": {"type": ["integer", "null"]},
                       **{k: NUM for k in ("others", "others_max", "own", "steal", "load1", "psi_cpu", "psi_io",
                                           "psi_mem")}}}

REPORT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://llm-chaos.invalid/schema/report-2.json",
    "title": "llm-chaos run report",
    "type": "object",
    "required": ["report_version", "experiment", "verdict", "exit_code", "checks", "steps", "faults", "timeline"],
    "properties": {
        "report_version": {"const": 2},
        "experiment": {"type": "object", "required": ["name"]},
        "verdict": {"enum": ["passed", "failed", "aborted", "inconclusive", "interrupted", "error", "incomplete"]},
        "exit_code": {"type": ["integer", "null"]},
        "reason": {"type": ["string", "null"]},
        "started": NUM, "duration_s": NUM, "load_started": NUM,
        "target": {"type": "object"},
        "load": {"type": ["object", "null"], "properties": {
            "model": {"type": ["string", "null"]}, "tokenizer": {"enum": ["byte", "estimate", "auto", None]},
            "token_counts": {"enum": ["exact", "estimate"]}}},
        "checks": {"type": "array", "items": CHECK},
        "steps": {"type": "array", "items": {"type": "object", "required": ["step", "requests"]}},
        "faults": {"type": "array", "items": {"type": "object", "required": ["name", "type", "applied"]}},
        "notes": {"type": "array", "items": {"type": "string"}},
        "timeline": {"type": "array", "items": {"type": "object", "required": ["t", "event"]}},
        "requests": {"type": "integer"},
        "analysis": {"type": "object", "description": "the settings the evidence was computed with",
                     "properties": {"confidence": {"type": "number"}, "recovery_window": {"type": "number"},
                                    "slo": {"type": "object"},
                                    "goodput": {"type": "object", "description": "the per-request bounds goodput "
                                                "counted with, seconds (null: not bounded), and their source "
                                                "(null: no bounds, no goodput)",
                                                "properties": {k: NUM for k in ("ttft", "tpot", "e2e")}}}},
        "phases": {"type": "array", "items": PHASE},
        "recovery": {"type": ["object", "null"], "properties": {
            "faults": {"type": "array", "items": {"type": "object", "required": ["fault", "start", *FOUR],
                                                   "properties": FOUR}},
            "run": {"type": ["object", "null"], "properties": FOUR},
            "window_s": {"type": "number"}, "baseline_throughput": ESTIMATE}},
        "diagnosis": {"type": "array", "items": {"type": "object", "required": ["cause", "evidence", "advice"]}},
        "advice": {"type": "object"},
        "server_metrics": {"type": ["object", "null"]},
        "stability": {"type": ["object", "null"]},
        "host": {"type": ["object", "null"], "description": "the host while the run ran: CPU used by processes "
                 "outside the run, the run's own, steal, load and pressure, every second (series), over the load "
                 "and per phase (null: not measured)",
                 "properties": {"file": {"type": "string"}, "ncpu": {"type": ["integer", "null"]}, "load": HOST,
                                "phases": {"type": "object", "additionalProperties": HOST},
                                "series": {"type": "array", "items": {"type": "object", "required": ["t"]}}}},
    },
}
