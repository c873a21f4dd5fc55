"""The JSON Schema of experiment and target files (`chaos schema` prints it for editors)."""

from __future__ import annotations

from ..faults import FAULT_TYPES
from ..schemabits import BOOL, DURATION, LINK, PERCENT, POSITIVE, duration, integer, number, percent
from ..schemabits import obj as _obj  # chaos.suite.model builds its schema with it too

MAX_USERS = 100_000
MAX_TOKENS = 1_000_000

_RANGE_TEXT = f"an integer from 1 to {MAX_TOKENS:,}, or a range LO-HI such as 200-500 (LO <= HI)"
RANGE = {"description": _RANGE_TEXT,
         "anyOf": [integer(1, MAX_TOKENS), {"type": "string", "pattern": r"^\s*\d{1,9}(\s*-\s*\d{1,9})?\s*$"}],
         "x-chaos": {"kind": "tokens", "min": 1, "max": MAX_TOKENS, "text": _RANGE_TEXT}}
# input_tokens also takes sizes, each request one of them (a pair in a list would read as a range: 3 or more).
_SIZES_TEXT = ("or sizes, each request one of them: a list of 3 or more such as [1000, 4000, 16000], or text "
               "1000,16000")
INPUT_SIZES = {"description": f"{_RANGE_TEXT}; {_SIZES_TEXT}",
               "anyOf": [RANGE, {"type": "array", "items": integer(1, MAX_TOKENS), "minItems": 3, "maxItems": 64},
                         {"type": "string", "pattern": r"^\s*\d{1,9}(\s*,\s*\d{1,9})+\s*$"}]}
TIMEOUT = {"description": POSITIVE["description"] + "; or auto", "anyOf": [POSITIVE, {"const": "auto"}]}
VARS = {"type": "object", "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": ["string", "number", "boolean"]},
        "description": "variables this file may use as ${NAME}, with defaults; --var NAME=VALUE and the "
                       "environment (for these names only) override"}

PRESET = {"enum": ["tiny", "tiny-long", "small", "qwen3-0.6b"]}
IGNORE_EOS = {"type": "boolean", "description": "send vLLM's ignore_eos when the workload fixes the output "
                                               "length (default true); false for vendors that refuse unknown "
                                               "fields"}
ALLOW_REMOTE = {"type": "boolean", "description": "allow a non-loopback address (default false): replicas "
                                                 "listening beyond 127.0.0.1, or a remote base_url"}
STARTUP = duration(positive=True, maximum=3600)
HOSTS = {"type": "object", "minProperties": 1, "maxProperties": 60,
         "propertyNames": {"pattern": "^[a-z][a-z0-9-]{0,23}$"},
         "additionalProperties": {"type": "array", "minItems": 1, "maxItems": 64, "uniqueItems": True,
                                  "items": {"type": "string", "pattern": "^(r[0-9]+|b[0-9]+|p[0-9]+|gw|master|w[0-9]+)$"}},
         "description": "lay the target's processes out on hosts, each a network namespace the run makes (root "
                        "only; docs/hosts.md): host name -> the instance ids on it (r0, b0, p0, gw; every "
                        "instance on one; a command listens on {host}) and the load's Locust processes (master, w0, w1...: load.workers). Kernel network faults (packet_loss, partition, tcp_reset, link_rate) act on a host's "
                        "link"}
TOXIPROXY = {"description": "the Toxiproxy server network faults go through (default: the bundled one, started "
                            "by the run)",
             "oneOf": [_obj({"url": {"type": "string", "pattern": "^http://"}}, ["url"],
                            "a toxiproxy-server you run (container or host): its API URL"),
                       _obj({"server": {"type": "string", "minLength": 1}}, ["server"],
                            "a toxiproxy-server binary the run starts, journals and stops")]}
KEEP_ALIVE = {"type": "boolean", "description": "clients reuse connections (default true); false: a new connection "
                                               "per request, sent with `Connection: close`, for a server that "
                                               "closes connections it promised to keep (docs/engines.md)"}
COMMON_TARGET = {"name": {"type": "string", "maxLength": 200}, "vars": VARS, "ignore_eos": IGNORE_EOS,
                 "keep_alive": KEEP_ALIVE,
                 "toxiproxy": TOXIPROXY,
                 # chaos capacity's cost sum (docs/plan.md); the command line's --price-* win
                 "price_per_hour": {**number(0, 1e9, exclusive=True),
                                    "description": "what one instance costs an hour, in any currency"},
                 "price_per_1k_tokens": {**number(0, 1e9, exclusive=True),
                                         "description": "what 1,000 tokens (prompt + output) cost, in any currency"},
                 "links": {"type": "array", "items": LINK, "maxItems": 64, "uniqueItems": True,
                           "description": "links to put proxies on even where no fault names them (a baseline "
                                          "through the same hops)"}}

GATEWAY = _obj({
    "retries": integer(0, 5),
    "first_token_timeout": TIMEOUT, "total_timeout": TIMEOUT,
    "stream_idle_timeout": duration(positive=True, maximum=3600),
    "backoff": duration(maximum=60), "max_concurrency": integer(1, MAX_USERS),
    "max_queue": integer(0, 1_000_000), "queue_timeout": duration(positive=True, maximum=3600),
    "cache_size": integer(0, 1_000_000),
    "health_interval": duration(positive=True, maximum=3600),
    "eject": _obj({"after_failures": integer(1, 1000), "for": duration(positive=True, maximum=3600)}),
    "breaker": _obj({"error_rate": percent(positive=True), "min_requests": integer(1, 100_000),
                     "window": integer(1, 100_000), "open": duration(positive=True, maximum=3600)}),
    "backup": _obj({"replicas": integer(1, 8), "preset": PRESET}),
}, description="a resilient gateway in front of the replicas; the load goes through it")

METRICS_PATH = {"type": "string", "pattern": "^/",
                "description": "where each instance serves Prometheus text, from the root of its host (default "
                               "/metrics, not under the API's base path)"}
# an integer item is a word too: `-c, ${CONTEXT}` substitutes a number
COMMAND = {"description": "command line; {port} and {replica} are filled in",
           "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": ["string", "integer"]}}]}
# a boolean too: a switch such as `${LITELLM_HTTPX:-false}` is YAML's false by the time the schema sees it
ENV = {"type": "object", "additionalProperties": {"type": ["string", "boolean"]},
       "description": "variables its processes get (a boolean is passed as the text true or false)"}

# chaos/load/limits.py keeps a load within them (docs/targets.md)
LIMITS = _obj({"requests_per_minute": integer(1, 1_000_000_000, "requests the key may send a minute, retries "
                                                                "included"),
               "tokens_per_minute": integer(1, 1_000_000_000_000, "prompt + max_tokens a minute"),
               "max_concurrency": integer(1, MAX_USERS, "requests in flight at once"),
               "max_output_tokens": integer(1, MAX_TOKENS, "the largest max_tokens a request may ask for")},
              description="the vendor's limits for this key: a load against this target is capped to them "
                          "(users, arrival rate, max_tokens, a pause between a user's requests)")

KEY_ENV = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 128,
           "description": "the NAME of the environment variable that holds the API key"}
ENGINES = ("reference", "vllm", "llama.cpp", "llama-cpp-python", "sglang", "ollama", "litellm", "envoy", "nginx",
           "other")


def _stack_part(gateway: bool) -> dict:
    props = {"command": {**COMMAND, "description": "command line; {port}, {replica}, {id}, {run_dir}, {python} (the "
                                                   "toolkit's interpreter) and the gateway's {config} are filled in"},
             "health_path": {"type": "string", "pattern": "^/"}, "metrics_path": METRICS_PATH,
             "metrics_key_env": {**KEY_ENV, "description": "the NAME of the variable whose value its /metrics "
                                                           "wants as a bearer key (LiteLLM's master key)"},
             "engine": {"enum": list(ENGINES), "description": "what runs there: how its errors and metrics read"},
             "env": ENV,
             "secrets": {"type": "array", "maxItems": 32, "uniqueItems": True,
                         "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                         "description": "NAMES of variables this part needs: must be set, passed to its processes "
                                        "only, written nowhere"},
             "files": {"type": "array", "maxItems": 64, "items": {"type": "string"},
                       "description": "files that must exist before anything starts (a model, a binary)"},
             "build": {"type": "string", "description": "the command that makes the missing files (said in errors)"},
             "api_base": {"type": "string", "pattern": "^/", "description": "its OpenAI API's base path (/v1)"}}
    if gateway:
        props |= {"config": {"type": "string", "description": "a Jinja template of the gateway's config, relative "
                                                              "to this file, rendered with the replicas' addresses"},
                  "routing_delay": duration(maximum=3600),
                  "check": {**COMMAND, "description": "a command that tests the rendered config before anything "
                                                      "starts ({config}, {run_dir}, {python}; nginx -t): a non-zero "
                                                      "exit refuses the target with what it said"}}
    return _obj(props, ["command"], "the gateway in front of the replicas; the load goes through it" if gateway
                else "how each replica is started")


TARGET_KINDS = {
    "reference": _obj({"kind": {"const": "reference"}, **COMMON_TARGET,
              "replicas": integer(1, 16), "preset": PRESET,
              "model_name": {"type": "string"}, "threads": integer(0, 256),
              "max_model_len": integer(16, 1_048_576),
              "args": {"type": "array", "items": {"type": "string"},
                       "description": "extra `chaos reference serve` arguments"},
              "allow_remote": ALLOW_REMOTE,
              "startup_timeout": STARTUP, "gateway": GATEWAY, "hosts": HOSTS},
             ["kind"], "replicas of the bundled reference server, each its own process group"),
    "process": _obj({"kind": {"const": "process"}, **COMMON_TARGET, "command": COMMAND,
              "replicas": integer(1, 16),
              "model": {"type": "string"}, "health_path": {"type": "string", "pattern": "^/"}, "metrics_path": METRICS_PATH,
              "env": ENV, "startup_timeout": STARTUP, "hosts": HOSTS},
             ["kind", "command"], "any command that serves an OpenAI-compatible API on {port} ({host} with hosts:)"),
    "docker": _obj({"kind": {"const": "docker"}, **COMMON_TARGET, "image": {"type": "string"},
              "command": COMMAND, "replicas": integer(1, 16),
              "model": {"type": "string"}, "health_path": {"type": "string", "pattern": "^/"}, "metrics_path": METRICS_PATH,
              "env": ENV,
              "volumes": {"type": "object", "additionalProperties": {"type": "string"},
                          "description": "host path: container path, mounted read-only"},
              "docker_host": {"type": "string"}, "startup_timeout": STARTUP},
             ["kind", "image"], "containers run with --network host through the docker SDK"),
    "stack": _obj({"kind": {"const": "stack"}, **COMMON_TARGET, "replicas": integer(1, 16),
              "model": {"type": "string", "description": "the model name clients ask the stack for"},
              "api_key_env": KEY_ENV, "startup_timeout": STARTUP, "hosts": HOSTS,
              "replica": _stack_part(False), "gateway": _stack_part(True)},
             ["kind", "model", "replica"], "a user's stack: replicas of any command, optionally a gateway of any "
                                           "command in front (its config rendered from the replicas' addresses)"),
    "openai": _obj({"kind": {"const": "openai"}, **COMMON_TARGET,
              "base_url": {"type": "string", "pattern": "^https?://",
                           "description": "an http:// or https:// URL ending in /v1 (Ark: /api/v3)"},
              "model": {"type": "string"},
              "api_key_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": 128,
                              "description": "the NAME of the environment variable that holds the API key"},
              "allow_remote": ALLOW_REMOTE, "limits": LIMITS, "metrics_path": METRICS_PATH},
             ["kind", "base_url", "model"], "a remote OpenAI-compatible endpoint"),
}

TARGET = {"description": "how to start or reach the system under test: kind and its own settings",
          "type": "object", "required": ["kind"], "properties": {"kind": {"enum": sorted(TARGET_KINDS)}},
          "allOf": [{"if": {"properties": {"kind": {"const": k}}}, "then": v} for k, v in TARGET_KINDS.items()]}

SLO = _obj({"p50_latency": POSITIVE, "p95_latency": POSITIVE, "p99_latency": POSITIVE, "ttft_p95": POSITIVE,
            "ttft_p99": POSITIVE, "error_rate": PERCENT},
           description="latency bounds are on E2E unless named ttft; never on the mean")
GOODPUT = {**_obj({"ttft": POSITIVE, "tpot": POSITIVE, "e2e": POSITIVE}, None,
                  "the bounds a request meets to count as good (goodput, per phase in the report): TTFT, TPOT "
                  "((E2E - TTFT) / (output tokens - 1)) and E2E, each of a request, at least one; a failed request "
                  "is never good. Without it, slo's P99 (else P95) bounds on TTFT and E2E"),
           "minProperties": 1}

_RAMP_TEXT = f"START:END users, each from 1 to {MAX_USERS:,}, grown linearly over duration"
# chaos/load/stability.py (its QUESTIONS: at most 16 probes); docs/stability.md
STABILITY_LOAD = _obj({"share": percent(positive=True), "prompts": integer(1, 16),
                       "structured": integer(0, 16, "how many of the prompts ask for JSON (default 1)"),
                       "json_schema": {"type": "boolean", "description": "every other structured prompt asks "
                                                                        "for a json_schema (default false)"},
                       "max_tokens": integer(1, 100_000), "seed": integer(0, 2**63 - 1)},
                      description="identical greedy probes mixed into the workload at share (default 20%) of "
                                  "the requests, judged by verify.stability")
LOAD = _obj({
    "workload": {"enum": ["chat", "completion", "rag", "long", "prefix", "json", "replay", "stability"]},
    "mix": {"type": "object", "minProperties": 1, "additionalProperties": number(0, 1_000_000, exclusive=True)},
    "users": integer(1, MAX_USERS), "spawn_rate": number(0, 10_000, exclusive=True),
    "duration": POSITIVE,
    "steps": {"type": "array", "items": integer(1, MAX_USERS), "minItems": 1, "maxItems": 100},
    "step_duration": POSITIVE,
    "ramp": {"type": "string", "pattern": "^ *[0-9]{1,9} *: *[0-9]{1,9} *$", "description": _RAMP_TEXT,
             "x-chaos": {"kind": "ramp", "min": 1, "max": MAX_USERS, "text": _RAMP_TEXT}},
    "rate": number(0, 100_000, exclusive=True), "poisson": BOOL,
    "max_users": integer(1, MAX_USERS),
    "max_requests": integer(1, 1_000_000_000),
    "input_tokens": INPUT_SIZES, "output_tokens": RANGE, "temperature": number(0, 2),
    "stream": BOOL, "seed": integer(0, 2**63 - 1),
    "replay": {"type": "string"}, "replay_speed": number(0, 1000, exclusive=True),
    "replay_scrub": BOOL,
    "replay_filter": _obj({"status": {"type": "array", "minItems": 1, "items": {"anyOf": [
                               integer(100, 599), {"type": "string", "pattern": "^[1-5][xX][xX]$"}]}},
                           "error_code": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                           "min_input_tokens": integer(0, 1 << 30), "max_input_tokens": integer(0, 1 << 30)},
                          description="replay only the log lines that match (as logged); the rest count as filtered"),
    "retries": integer(0, 10),
    "workers": integer(0, 32, "Locust workers beside a master (0: one Locust process); on hosts where the "
                              "target's hosts: place them (master, w0, w1...)"),
    "timeouts": _obj({"connect": POSITIVE, "first_token": TIMEOUT, "total": TIMEOUT}),
    "stop_timeout": DURATION,
    "stability": STABILITY_LOAD,
}, description="how load is driven (Locust)")

FAULT_COMMON = {"type": {"type": "string"}, "at": DURATION, "name": {"type": "string", "maxLength": 200}}


def fault_schema(cls) -> dict:
    """The schema a fault of this class is validated against: the keys every fault takes, and its own settings."""
    own = cls.schema
    return _obj({**FAULT_COMMON, **own["properties"]}, ["type", "at", *own.get("required", [])],
                own.get("description", ""))

_RATE_OR_OFF = {"description": PERCENT["description"] + "; or off (reported, not judged)",
                "anyOf": [PERCENT, {"const": "off"}]}
STABILITY_VERIFY = _obj({
    "identical": _RATE_OR_OFF, "json_valid": _RATE_OR_OFF, "max_truncated": _RATE_OR_OFF,
    "max_repetition": _RATE_OR_OFF, "max_garbled": _RATE_OR_OFF,
    "loop_threshold": {**number(0, 1, exclusive=True), "description": "an output whose closing loop takes more "
                                                                      "than this share of it is a loop (0.5)"},
    "min_repeats": integer(1, 1_000_000, "probe answers during and after the faults it takes to judge "
                                         "identical (10)")},
    description="output stability (chaos/verify/stability.py, docs/stability.md): repeated greedy probes answer "
                "identically before, during and after the faults; JSON validity, truncation, loops and garbled "
                "text as rates")
VERIFY = _obj({
    "error_rate_during_fault": _obj({"max": PERCENT}, ["max"]),
    "recovery_time": _obj({"max": POSITIVE, "window": POSITIVE}, ["max"]),
    "slo_during_fault": SLO,
    "slo_after": SLO,
    "status_codes": _obj({"allowed": {"type": "array", "items": integer(100, 599), "minItems": 1,
                                      "maxItems": 500}}, ["allowed"]),
    "served_by_all": {"type": "boolean", "description": "after recovery every instance serves again"},
    "fallback": _obj({"within": POSITIVE, "paths": {"type": "array", "items": {"enum": ["backup", "cache"]},
                                                  "uniqueItems": True}},
                     ["within"], "a fallback path served within this time of the first fault"),
    "latency_growth": _obj({"metric": {"enum": ["ttft", "e2e"]}, "max_knee_ratio": number(1, 1000, exclusive=True),
                            "min_requests": integer(2, 1_000_000), "confidence": number(0.5, 1, exclusive=True)},
                           description="latency against load.input_tokens given as sizes: a line is fitted and "
                                       "it fails on a knee, a step growing over max_knee_ratio (default 3) x the "
                                       "line through the smaller sizes (chaos/verify/growth.py)"),
    "stability": STABILITY_VERIFY,
}, description="what must hold; each check is reported with its measured value")

_SCRAPE_TEXT = "a duration from 0.1s to 1h (250ms, 1s, 5s), or 0 or off to not scrape"
METRICS = _obj({"interval": {
    "description": _SCRAPE_TEXT,
    "anyOf": [{"enum": [0, False, "off", "0s"]}, number(0.1, 3600),
              {"type": "string", "pattern": DURATION["anyOf"][1]["pattern"],
               "x-chaos": {"kind": "duration", "min": 0.1, "max": 3600, "text": _SCRAPE_TEXT}}]}},
    description="every instance's /metrics, scraped through the run into metrics.jsonl (default every 1s)")

ABORT_METRIC = _obj({"key": {"type": "string", "minLength": 1, "maxLength": 300,
                             "description": "a scraped key (waiting, kv_usage, gw_cooldowns_total ...: "
                                            "docs/server-metrics.md) or an extra series as name{labels}"},
                     "above": {"type": "number", "description": "the condition holds while the value is above"},
                     "instance": {"type": "string", "description": "an instance id (r0, gw ...) or any (default)"}},
                    ["key", "above"], "a scraped metric of an instance")
ABORT_PROMETHEUS = _obj({"url": {"type": "string", "pattern": "^https?://",
                                 "description": "the Prometheus server (loopback unless the target allows remote)"},
                         "query": {"type": "string", "minLength": 1, "maxLength": 4000,
                                   "description": "PromQL; holds while it returns any sample (write the comparison "
                                                  "into it, as in an alerting rule)"},
                         "every": duration(positive=True, maximum=60)},
                        ["url", "query"], "a PromQL query against your Prometheus")
ABORT = {**_obj({"error_rate": percent(positive=True), "for": POSITIVE,
                 "metrics": {"type": "array", "items": ABORT_METRIC, "minItems": 1, "maxItems": 32},
                 "prometheus": ABORT_PROMETHEUS}, None,
                "halt the run, revert everything and exit 3 when one of these holds for the whole window: the "
                "clients' error rate, a scraped metric, a PromQL query (docs/engines.md)"),
         "anyOf": [{"required": ["error_rate"]}, {"required": ["metrics"]}, {"required": ["prometheus"]}]}

_EXPERIMENT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://llm-chaos.dev/schema/experiment.json",
    "title": "llm-chaos experiment",
    "type": "object",
    "additionalProperties": False,
    # Extension keys hold anchors for merge keys (x-defaults: &d {...}, then <<: *d); nothing reads them.
    "patternProperties": {"^x-": {}},
    "required": ["name", "target", "load"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                 "description": "letters, digits, _ . - (at most 100): it names the run directory"},
        "description": {"type": "string"},
        "vars": VARS,
        # A path to a target file, or the target inline (validated against TARGET_FILE on its own, so its
        # errors are as precise as a target file's).
        "target": {"type": ["string", "object"], "description": "path to a target file, or a target mapping"},
        "load": LOAD,
        "steady_state": _obj({"window": POSITIVE, "slo": SLO, "health": BOOL, "goodput": GOODPUT}),
        "faults": None,  # from FAULT_TYPES, when asked for (below)
        "verify": VERIFY,
        "abort_when": ABORT,
        "metrics": METRICS,
    },
}

TARGET_FILE = {"$schema": "https://json-schema.org/draft/2020-12/schema",
               "$id": "https://llm-chaos.dev/schema/target.json", "title": "llm-chaos target", **TARGET}

# FAULTS (type -> its schema), FAULT and EXPERIMENT are composed from FAULT_TYPES when asked for, and again after
# it changed: a fault class registered after this module was imported (a plugin's, a test's) is then validated,
# published and documented like the others. Unchanged, each is the same object, which the validator cache needs.
FAULTS: dict
FAULT: dict
EXPERIMENT: dict
_composed: tuple = ((), {})


def _compose(types: tuple) -> dict:
    faults = {t: fault_schema(cls) for t, cls in types}
    fault = {"description": "a fault: type, when (at), and its own settings",
             "type": "object", "required": ["type", "at"],
             "properties": {"type": {"enum": sorted(faults)}},
             "allOf": [{"if": {"properties": {"type": {"const": t}}}, "then": s} for t, s in faults.items()]}
    experiment = {**_EXPERIMENT, "properties": {**_EXPERIMENT["properties"],
                                                "faults": {"type": "array", "items": fault, "maxItems": 100}}}
    return {"FAULTS": faults, "FAULT": fault, "EXPERIMENT": experiment}


def __getattr__(name: str):
    global _composed
    if name not in ("FAULTS", "FAULT", "EXPERIMENT"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    types = tuple(FAULT_TYPES.items())
    if _composed[0] != types:
        _composed = (types, _compose(types))
    return _composed[1][name]
