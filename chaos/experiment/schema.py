"""The JSON Schema of experiment and target files (`chaos schema` prints it for editors)."""

from __future__ import annotations

DURATION = {"description": "a duration: 30s, 2m, 1h, 250ms, or a number of seconds",
            "anyOf": [{"type": "number", "minimum": 0},
                      {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"}]}
PERCENT = {"description": "a fraction: 0.1%, 50%, or a number from 0 to 1",
           "anyOf": [{"type": "number", "minimum": 0, "maximum": 1},
                     {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*%\s*$"}]}
RANGE = {"description": "an integer or a range like 200-500",
         "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^\s*\d+(\s*-\s*\d+)?\s*$"}]}
SIGNAL = {"enum": ["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"]}
INSTANCE = {"description": "an instance index (0-based), random, or a replica id such as r1 or b0",
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9_-]*$"}]}


def _obj(props: dict, required: list[str] | None = None, description: str = "") -> dict:
    d = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        d["required"] = required
    if description:
        d["description"] = description
    return d


GATEWAY = _obj({
    "retries": {"type": "integer", "minimum": 0, "maximum": 5},
    "first_token_timeout": {"anyOf": [DURATION, {"const": "auto"}]},
    "total_timeout": {"anyOf": [DURATION, {"const": "auto"}]},
    "backoff": DURATION, "max_concurrency": {"type": "integer", "minimum": 1},
    "max_queue": {"type": "integer", "minimum": 0}, "queue_timeout": DURATION,
    "cache_size": {"type": "integer", "minimum": 0},
    "health_interval": DURATION,
    "eject": _obj({"after_failures": {"type": "integer", "minimum": 1}, "for": DURATION}),
    "breaker": _obj({"error_rate": PERCENT, "min_requests": {"type": "integer", "minimum": 1},
                     "window": {"type": "integer", "minimum": 1}, "open": DURATION}),
    "backup": _obj({"replicas": {"type": "integer", "minimum": 1, "maximum": 8},
                    "preset": {"enum": ["tiny", "small", "qwen3-0.6b"]}}),
}, description="a resilient gateway in front of the replicas; the load goes through it")

TARGET_KINDS = {
    "reference":         _obj({"kind": {"const": "reference"}, "name": {"type": "string"},
              "replicas": {"type": "integer", "minimum": 1, "maximum": 16},
              "preset": {"enum": ["tiny", "small", "qwen3-0.6b"]},
              "model_name": {"type": "string"}, "threads": {"type": "integer", "minimum": 0},
              "max_model_len": {"type": "integer", "minimum": 16},
              "args": {"type": "array", "items": {"type": "string"},
                       "description": "extra `chaos reference serve` arguments"},
              "startup_timeout": DURATION, "gateway": GATEWAY},
             ["kind"], "replicas of the bundled reference server, each its own process group"),
    "process": _obj({"kind": {"const": "process"}, "name": {"type": "string"},
              "command": {"description": "command line; {port} and {replica} are filled in",
                          "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
              "replicas": {"type": "integer", "minimum": 1, "maximum": 16},
              "model": {"type": "string"}, "health_path": {"type": "string"},
              "env": {"type": "object", "additionalProperties": {"type": "string"}},
              "startup_timeout": DURATION},
             ["kind", "command"], "any command that serves an OpenAI-compatible API on {port}"),
    "docker": _obj({"kind": {"const": "docker"}, "name": {"type": "string"}, "image": {"type": "string"},
              "command": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
              "replicas": {"type": "integer", "minimum": 1, "maximum": 16},
              "model": {"type": "string"}, "health_path": {"type": "string"},
              "env": {"type": "object", "additionalProperties": {"type": "string"}},
              "volumes": {"type": "object", "additionalProperties": {"type": "string"},
                          "description": "host path: container path, mounted read-only"},
              "docker_host": {"type": "string"}, "startup_timeout": DURATION},
             ["kind", "image"], "containers run with --network host through the docker SDK"),
    "openai": _obj({"kind": {"const": "openai"}, "name": {"type": "string"},
              "base_url": {"type": "string", "pattern": "^https?://"}, "model": {"type": "string"},
              "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                              "description": "the environment variable that holds the API key"}},
             ["kind", "base_url", "model"], "a remote OpenAI-compatible endpoint"),
}

TARGET = {"description": "how to start or reach the system under test: kind and its own settings",
          "type": "object", "required": ["kind"], "properties": {"kind": {"enum": sorted(TARGET_KINDS)}},
          "allOf": [{"if": {"properties": {"kind": {"const": k}}}, "then": v} for k, v in TARGET_KINDS.items()]}

SLO = _obj({"p50_latency": DURATION, "p95_latency": DURATION, "p99_latency": DURATION, "ttft_p95": DURATION,
            "ttft_p99": DURATION, "error_rate": PERCENT},
           description="latency bounds are on E2E unless named ttft; never on the mean")

LOAD = _obj({
    "workload": {"enum": ["chat", "rag", "long", "prefix", "json", "replay"]},
    "mix": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
    "users": {"type": "integer", "minimum": 1}, "spawn_rate": {"type": "number", "exclusiveMinimum": 0},
    "duration": DURATION,
    "steps": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
    "step_duration": DURATION,
    "ramp": {"type": "string", "pattern": "^ *[0-9]+ *: *[0-9]+ *$",
             "description": "START:END users, grown linearly over duration"},
    "rate": {"type": "number", "exclusiveMinimum": 0}, "poisson": {"type": "boolean"},
    "max_users": {"type": "integer", "minimum": 1},
    "max_requests": {"type": "integer", "minimum": 1},
    "input_tokens": RANGE, "output_tokens": RANGE, "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "stream": {"type": "boolean"}, "seed": {"type": "integer"},
    "replay": {"type": "string"}, "replay_speed": {"type": "number", "exclusiveMinimum": 0},
    "retries": {"type": "integer", "minimum": 0, "maximum": 10},
    "timeouts": _obj({"connect": DURATION, "first_token": {"anyOf": [DURATION, {"const": "auto"}]},
                      "total": {"anyOf": [DURATION, {"const": "auto"}]}}),
    "stop_timeout": DURATION,
}, description="how load is driven (Locust)")

FAULT_COMMON = {"type": {"type": "string"}, "at": DURATION, "name": {"type": "string"}}

FAULTS = {
    "kill_instance": _obj({**FAULT_COMMON, "instance": INSTANCE, "count": {"type": "integer", "minimum": 1},
                           "signal": SIGNAL, "restart_after": DURATION},
                          ["type", "at"], "kill instances (N of M with count); restart them after a delay"),
    "pause_instance": _obj({**FAULT_COMMON, "instance": INSTANCE, "count": {"type": "integer", "minimum": 1},
                            "duration": DURATION},
                           ["type", "at", "duration"], "SIGSTOP the instance's process group (docker pause), "
                                                       "SIGCONT after duration"),
    "server_hook": _obj({**FAULT_COMMON, "instance": {"anyOf": [INSTANCE, {"const": "all"}]},
                         "duration": DURATION,
                         "step_delay_ms": {"type": "number", "minimum": 0},
                         "hang_s": {"type": "number", "minimum": 0},
                         "kv_block_cap": {"type": "integer", "minimum": 1},
                         "fail_fraction": {"type": "number", "minimum": 0, "maximum": 1}},
                        ["type", "at"], "the reference server's own fault hooks (slow steps, a hang, a KV cap, "
                                        "failing a fraction with 500)"),
}

FAULT = {"description": "a fault: type, when (at), and its own settings",
         "type": "object", "required": ["type", "at"],
         "properties": {"type": {"enum": sorted(FAULTS)}},
         "allOf": [{"if": {"properties": {"type": {"const": t}}}, "then": s} for t, s in FAULTS.items()]}

VERIFY = _obj({
    "error_rate_during_fault": _obj({"max": PERCENT}, ["max"]),
    "recovery_time": _obj({"max": DURATION, "window": DURATION}, ["max"]),
    "slo_during_fault": SLO,
    "slo_after": SLO,
    "status_codes": _obj({"allowed": {"type": "array", "items": {"type": "integer", "minimum": 100,
                                                                     "maximum": 599}}}, ["allowed"]),
    "served_by_all": {"type": "boolean", "description": "after recovery every instance serves again"},
    "fallback": _obj({"within": DURATION, "paths": {"type": "array", "items": {"enum": ["backup", "cache"]}}},
                     ["within"], "a fallback path served within this time of the first fault"),
}, description="what must hold; each check is reported with its measured value")

ABORT = _obj({"error_rate": PERCENT, "for": DURATION}, ["error_rate"],
             "halt the run, revert everything and exit 3 when this holds for the whole window")

EXPERIMENT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://llm-chaos.dev/schema/experiment.json",
    "title": "llm-chaos experiment",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "target", "load"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
        "description": {"type": "string"},
        "vars": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
                 "description": "defaults for ${VAR} references; --var NAME=VALUE overrides"},
        # A path to a target file, or the target inline (validated against TARGET_FILE on its own, so its
        # errors are as precise as a target file's).
        "target": {"type": ["string", "object"], "description": "path to a target file, or a target mapping"},
        "load": LOAD,
        "steady_state": _obj({"window": DURATION, "slo": SLO, "health": {"type": "boolean"}}),
        "faults": {"type": "array", "items": FAULT},
        "verify": VERIFY,
        "abort_when": ABORT,
    },
}

TARGET_FILE = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               "$id": "https://llm-chaos.dev/schema/target.json", "title": "llm-chaos target", **TARGET}
