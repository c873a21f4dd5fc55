"""`chaos init`: a target file and two first experiments for your own OpenAI-compatible endpoint.

What it writes is meant to be read and edited: every value the user did not give is a ${VAR:-default}, so the
same files run in a quick check and in a longer one without edits. The key itself is never asked for, nor written:
only the name of the environment variable that holds it.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

from .common import is_loopback
from .errors import InputError, handled

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TARGET = """\
# {name}: {base_url}, written by `chaos init`. Edit it freely; `chaos validate` checks it.
{key_comment}
{engine_comment}
kind: openai
name: {name}
base_url: ${{{var}_BASE_URL:-{base_url}}}
model: ${{{var}_MODEL:-{model}}}
{key_line}ignore_eos: {ignore_eos}{eos_comment}
{remote}limits:                    # the load is capped to these (docs/targets.md): check them against your endpoint
  requests_per_minute: ${{{var}_RPM:-{rpm}}}
  max_concurrency: ${{{var}_MAX_CONCURRENCY:-{concurrency}}}
  max_output_tokens: ${{{var}_MAX_OUTPUT_TOKENS:-256}}
"""

REMOTE = """\
allow_remote: true         # not loopback: confirmed at `chaos init`; every request may be billed
"""

# The target, the load and the steady state both experiments share ({retries}: the rate-limited one retries).
LOAD = """\
target: targets/{name}.yaml
load:
  workload: chat
  users: ${{USERS}}
  duration: ${{LOAD_FOR}}
  input_tokens: 30-80
  output_tokens: 16-32
{retries}  timeouts: {{connect: 5s, first_token: 30s, total: 60s}}
steady_state:
  window: 10s
  slo: {{p95_latency: "${{P95:-10s}}", error_rate: 1%}}
"""

BASELINE = """\
# Proves: {name} holds its service level under a steady chat load with nothing broken.
# The numbers every later experiment is compared with: P95/P99 latency and time to first token, with their
# intervals, and the error rate.
#   chaos run experiments/{name}-baseline.yaml                      # 60 s
#   chaos run experiments/{name}-baseline.yaml --var LOAD_FOR=20s   # a quick look
name: {name}-baseline
description: >
  A steady chat load against {name} with no fault: the service level it holds (P95 latency, error rate) and the
  figures later runs are compared with (`chaos report --compare`).
vars:
  USERS: 2
  LOAD_FOR: 60s
{load}verify:
  status_codes: {{allowed: [200]}}
abort_when: {{error_rate: 50%, for: 10s}}
"""

RATE_LIMITED = """\
# Proves: a client keeps its error budget when {name} rate-limits.
# The LLM fault proxy, between the load and {name} (the client link), answers 30 % of requests with 429 and
# Retry-After for FAULT_FOR; the client retries with backoff, honouring Retry-After, so the error rate must stay
# within 5 %, and the report counts the retries by cause. Nothing is changed on {name} itself: the fault lives
# in the proxy this run starts and stops.
#   chaos run experiments/{name}-rate-limited.yaml
name: {name}-rate-limited
description: >
  30 % of requests to {name} answered 429 (Retry-After 200 ms) by the LLM fault proxy on the client link for
  FAULT_FOR: with 3 retries the error rate stays within 5 %, and service meets its SLO again after.
vars:
  USERS: 2
  LOAD_FOR: 45s
  FAULT_AT: 15s
  FAULT_FOR: 15s
{load}faults:
  - {{type: http_error, name: limited-30pct, at: "${{FAULT_AT}}", link: client, status: 429, retry_after: 200ms,
     probability: 30%, seed: 11, duration: "${{FAULT_FOR}}"}}
verify:
  error_rate_during_fault: {{max: 5%}}
  slo_after: {{p95_latency: "${{P95:-10s}}", error_rate: 1%}}
  status_codes: {{allowed: [200, 429]}}   # a 429 that outlasted every retry is the budget above, not a bug
abort_when: {{error_rate: 50%, for: 10s}}
"""


class InitError(InputError):
    pass


def register(sub, formatter) -> None:
    p = sub.add_parser(
        "init", help="scaffold a target and first experiments for your own endpoint", formatter_class=formatter,
        description="Write targets/NAME.yaml and experiments/NAME-baseline.yaml, NAME-rate-limited.yaml for an "
                    "OpenAI-compatible endpoint (a vendor, vLLM, SGLang, Ollama). Asks for what is not given when "
                    "run at a terminal; otherwise every value comes from the flags. A URL that is not loopback "
                    "is refused unless you confirm it (--allow-remote): every request to a vendor is billed.",
        epilog="examples:\n"
               "  chaos init                                          # asks for the URL, model and key variable\n"
               "  chaos init --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-0.6B --name vllm-local\n"
               "  chaos init --base-url https://api.openai.com/v1 --model gpt-4o-mini --key-env OPENAI_API_KEY \\\n"
               "             --allow-remote --name openai-mini\n"
               "then:\n"
               "  chaos validate targets/NAME.yaml experiments/NAME-*.yaml\n"
               "  chaos run experiments/NAME-baseline.yaml --var LOAD_FOR=20s")
    p.add_argument("dir", nargs="?", default=".", help="where targets/ and experiments/ go")
    p.add_argument("--base-url", help="the API base, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="the model name requests carry (asked from GET /models when not given)")
    p.add_argument("--key-env", help="the environment variable that holds the API key (none: no key)")
    p.add_argument("--name", help="a short name for the files (default: from the URL's host and port)")
    p.add_argument("--allow-remote", action="store_true",
                   help="confirm a URL that is not loopback (the load goes there, and may be billed)")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(func=cmd_init)


@handled
def cmd_init(a, ask=None) -> int:
    """ask(prompt, default) -> answer; input() at a terminal, none otherwise (every value from the flags)."""
    if ask is None and sys.stdin.isatty():
        ask = _ask
    plan = settle(a, ask)
    written = write(plan, a.dir, a.force)
    problems = _validate(written)
    for path in written:
        print(f"wrote {path}")
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        return 2
    where = "" if os.path.abspath(a.dir) == os.getcwd() else f"cd {a.dir} && "
    print(f"\nnext:\n  {where}chaos run experiments/{plan['name']}-baseline.yaml --var LOAD_FOR=20s")
    if plan["key_env"]:
        print(f"  (with {plan['key_env']} exported: the key is read from it at run time)")
    return 0


def settle(a, ask) -> dict:
    """Every value the files need, from the flags or the prompts; InitError says what is missing or wrong."""
    base_url = a.base_url or (ask and ask("base URL of the OpenAI-compatible API", "http://127.0.0.1:8000/v1"))
    if not base_url:
        raise InitError("give --base-url (e.g. http://127.0.0.1:8000/v1), or run `chaos init` at a terminal")
    u = urllib.parse.urlsplit(base_url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InitError(f"--base-url {base_url!r} is not an http(s) URL with a host")
    base_url = base_url.rstrip("/")
    remote = not is_loopback(u.hostname)
    if remote and not a.allow_remote:
        if not (ask and ask(f"{u.hostname} is not loopback: the load goes there and may be billed; "
                            f"type yes to allow it", "no").strip().lower() == "yes"):
            raise InitError(f"{u.hostname} is not a loopback address: give --allow-remote to confirm that the "
                            f"load may go there (and be billed), after checking the limits the target file sets")
    key_env = a.key_env if a.key_env is not None else (
        ask("environment variable holding the API key (empty: none)", "") if ask else "")
    key_env = (key_env or "").strip()
    if key_env and not ENV_NAME.match(key_env):
        raise InitError(f"--key-env {key_env!r} is not an environment variable name (the key itself is never "
                        f"given to chaos init: export it, and name the variable here)")
    model = a.model or _discover_model(base_url, key_env, ask, remote)
    engine, evidence = ("unknown", "init asks nothing of a remote endpoint") if remote else recognise(base_url,
                                                                                                      key_env)
    name = a.name or (ask and ask("a short name for the files", _default_name(u))) or _default_name(u)
    if not NAME.match(name):
        raise InitError(f"--name {name!r}: use lowercase letters, digits and '-' (at most 41), e.g. vllm-local")
    return {"base_url": base_url, "model": model, "key_env": key_env, "name": name, "remote": remote,
            "engine": engine, "evidence": evidence}


def _discover_model(base_url: str, key_env: str, ask, remote: bool) -> str:
    """GET /models of a loopback endpoint lists what it serves. A remote one is not asked: init sends nothing
    beyond this machine (its first request to a vendor is the run's, within the limits the target file sets)."""
    found = [] if remote else _models(base_url, key_env)
    if ask:
        answer = ask("model" + (f" (served: {', '.join(found[:5])})" if found else ""), found[0] if found else "")
        if answer:
            return answer
    elif len(found) == 1:
        return found[0]
    why = (f"the endpoint serves {', '.join(found[:5])}" if found else
           "init asks only a loopback endpoint for its models" if remote else "GET /models did not answer with a list")
    raise InitError(f"give --model ({why})")


def _get_json(url: str, key_env: str = ""):
    """GET url as JSON (the key as a bearer token where one is named), or None."""
    import json

    headers = {"Authorization": f"Bearer {os.environ[key_env]}"} if key_env and os.environ.get(key_env) else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return json.loads(r.read(1 << 20))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _model_cards(base_url: str, key_env: str) -> list[dict]:
    data = _get_json(base_url + "/models", key_env)
    cards = data.get("data") if isinstance(data, dict) else None
    return [m for m in cards if isinstance(m, dict)] if isinstance(cards, list) else []


def _models(base_url: str, key_env: str) -> list[str]:
    """The ids GET {base}/models lists, or [] (no answer, not JSON, not a list)."""
    return [m["id"] for m in _model_cards(base_url, key_env) if isinstance(m.get("id"), str)]


# engine -> does it take vLLM's ignore_eos (the load sends it when a workload fixes the output length)
TAKES_IGNORE_EOS = {"vllm": True, "sglang": True, "reference": True, "llama.cpp": True, "litellm": False,
                    "ollama": False, "unknown": False}
OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "llm-chaos": "reference", "llamacpp": "llama.cpp",
            "ollama": "ollama", "library": "ollama"}


def recognise(base_url: str, key_env: str) -> tuple[str, str]:
    """(engine, the evidence) from what a loopback endpoint answers: /v1/models' owned_by (vLLM says vllm),
    llama.cpp's /props, LiteLLM's /health/liveliness, Ollama's /api/version. ("unknown", why) otherwise."""
    owners = {m.get("owned_by") for m in _model_cards(base_url, key_env)}
    for owner in sorted(o for o in owners if isinstance(o, str)):
        if owner in OWNED_BY:
            return OWNED_BY[owner], f"GET /models: owned_by {owner}"
    u = urllib.parse.urlsplit(base_url)
    root = f"{u.scheme}://{u.netloc}"
    props = _get_json(root + "/props", key_env)
    if isinstance(props, dict) and ("default_generation_settings" in props or "total_slots" in props):
        return "llama.cpp", "GET /props answered as llama.cpp's server does"
    try:
        with urllib.request.urlopen(root + "/health/liveliness", timeout=5) as r:
            if b"alive" in r.read(256).lower():
                return "litellm", "GET /health/liveliness answered as LiteLLM's proxy does"
    except (OSError, ValueError, urllib.error.URLError):
        pass
    version = _get_json(root + "/api/version")
    if isinstance(version, dict) and "version" in version:
        return "ollama", "GET /api/version answered as Ollama does"
    return "unknown", "neither /models' owned_by, /props, /health/liveliness nor /api/version said which engine"


def _default_name(u: urllib.parse.SplitResult) -> str:
    host = "local" if is_loopback(u.hostname) else (u.hostname or "endpoint").removeprefix("api.").split(".")[0]
    name = re.sub(r"[^a-z0-9-]+", "-", f"{host}-{u.port}" if u.port else host).strip("-")
    return name[:41] or "endpoint"


def write(plan: dict, root: str, force: bool) -> list[str]:
    name, var = plan["name"], re.sub(r"[^A-Z0-9]", "_", plan["name"].upper())
    files = {
        os.path.join(root, "targets", f"{name}.yaml"): TARGET.format(
            name=name, var=var, base_url=plan["base_url"], model=plan["model"],
            key_comment=(f"# The key is read from ${plan['key_env']} at run time and never written anywhere." if
                         plan["key_env"] else "# No key (add api_key_env: VARIABLE if the endpoint needs one)."),
            key_line=f"api_key_env: {plan['key_env']}\n" if plan["key_env"] else "",
            engine_comment=f"# Engine: {plan.get('engine', 'unknown')} ({plan.get('evidence', 'not asked')}).",
            ignore_eos=str(TAKES_IGNORE_EOS.get(plan.get("engine", "unknown"), False)).lower(),
            eos_comment=("           # the engine takes vLLM's ignore_eos: fixed output lengths are exact"
                         if TAKES_IGNORE_EOS.get(plan.get("engine", "unknown"), False) else
                         "          # true only for engines that accept it (vLLM, SGLang, llama.cpp, the reference "
                         "server)"),
            remote=REMOTE.format(base_url=plan["base_url"]) if plan["remote"] else "",
            rpm=60 if plan["remote"] else 6000, concurrency=4 if plan["remote"] else 64),
        os.path.join(root, "experiments", f"{name}-baseline.yaml"): BASELINE.format(
            name=name, load=LOAD.format(name=name, retries="")),
        os.path.join(root, "experiments", f"{name}-rate-limited.yaml"): RATE_LIMITED.format(
            name=name, load=LOAD.format(name=name, retries="  retries: 3\n")),
    }
    there = [p for p in files if os.path.exists(p)]
    if there and not force:
        raise InitError(f"{', '.join(there)} exist: give --force to overwrite, or another --name")
    for path, text in files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return list(files)


def _validate(paths: list[str]) -> list[str]:
    """What `chaos validate` would say of the files written (nothing when they are valid)."""
    from .experiment.loader import ExperimentError, read_file
    from .experiment.model import load_experiment, load_target

    out = []
    for path in paths:
        try:
            if os.path.basename(os.path.dirname(path)) == "targets":
                load_target(read_file(path), {})
            else:
                load_experiment(path, {})
        except ExperimentError as e:
            out += e.problems  # each names its file:line:column
    return out


def _ask(prompt: str, default: str) -> str:
    try:
        answer = input(f"{prompt}" + (f" [{default}]" if default else "") + ": ").strip()
    except EOFError:
        answer = ""
    return answer or default
