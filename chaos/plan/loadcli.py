"""`chaos load TARGET`: drive load with Locust and print the seed's metrics table."""

from __future__ import annotations

import os
import sys
import time

from ..common import parse_duration, parse_vars
from ..errors import InputError, SetupError, counts_as, handled
from ..load.driver import LoadConfig, Timeouts, run_load, take_target
from ..load.shapes import SHAPES, plan_from
from ..load.workloads import WorkloadSpec, parse_mix

EPILOG = """examples:
  chaos load http://127.0.0.1:8000 --workload chat --users 10 --duration 30s
  chaos load http://127.0.0.1:8000 --workload rag --users 50 --duration 60s
  chaos load http://127.0.0.1:8000 --workload rag --steps 10,50,100,200,500 --step-duration 30m
  chaos load http://127.0.0.1:8000 --mix chat=3,prefix=1 --ramp 1:64 --duration 2m
  chaos load http://127.0.0.1:8000 --workload chat --rate 5,10,20 --poisson --step-duration 30s
  chaos load http://127.0.0.1:8000 --replay prod-requests.jsonl --rate 2 --duration 1m
  chaos load http://127.0.0.1:8000 --replay prod-requests.jsonl --replay-speed 4 --duration 5m
  chaos load http://127.0.0.1:8000 --replay prod-requests.jsonl --replay-speed 10 --max-requests 2000
  chaos load http://127.0.0.1:8000 --replay prod.jsonl --replay-speed 4 --scrub --replay-filter "status=400,5xx"
  chaos load https://ark.example/api/v3 --model M --api-key-env ARK_API_KEY --workload rag --users 10 --duration 5m
  chaos load targets/reference.yaml --var PRESET=tiny --workload chat --users 4 --duration 30s
  chaos load targets/vendors/vllm.yaml --var VLLM_MODEL=Qwen/Qwen3-0.6B --users 16 --duration 2m

TARGET is a URL, or a target file (docs/targets.md): the file's target is started, health-checked and always
stopped at the end (also on Ctrl-C); its ${NAME:-default}s take --var NAME=VALUE (e.g. --var PRESET=tiny), not
exported variables. A file that states limits: (targets/vendors/; the remote ones run only once you set
allow_remote: true in them) caps the load: users to max_concurrency, max_tokens to max_output_tokens, the arrival
rate, and a pause after each user's request so no minute holds more than requests_per_minute (or what
tokens_per_minute allows); a note names every cap.

Latency is reported as P50/P95/P99 per step (never the mean): TTFT (first token), TPOT (per request: time per
output token after the first), ITL (every inter-token gap, pooled), E2E; jitter is E2E P99/P50 (docs/load.md). In open-loop (--rate) runs latency counts from each request's
intended send time, and the summary says when the generator itself fell behind.
A timed replay (--replay-speed) sends each request of the log window (the first --max-requests, else the whole
log) once, in time order, at its scaled time; the summary's first lines give sent / not sent and the lag
(actual - intended send time, P50/P99/max); anything not sent makes the exit status 1.
--scrub redacts secrets and personal data from every replayed request before it is sent or stored (a note counts
them per kind); --replay-filter keeps matching lines (the rest are counted as filtered, never as lost); the notes
name the replayed requests that failed by their log line.
Writes requests.jsonl (one record a request), summary.json/.txt, and Locust's CSV and HTML in --out."""


def register(sub, formatter) -> None:
    p = sub.add_parser("load", help="drive load with Locust and report latency percentiles",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Drive an OpenAI-compatible target with Locust (streaming by default) and "
                                   "print per-step P50/P95/P99 of TTFT, TPOT, ITL and E2E, errors by class and "
                                   "throughput.")
    p.add_argument("target", help="base URL of the target, e.g. http://127.0.0.1:8000 or https://host/v1, or a "
                                  "target file (started and stopped by the load)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a target file's ${NAME}, e.g. --var PRESET=tiny (repeatable)")
    g = p.add_argument_group("what to send")
    g.add_argument("--workload", default="chat", help="chat, completion, rag, long, prefix, json, stability (docs/stability.md) or replay")
    g.add_argument("--mix", help="weighted workloads, e.g. chat=3,rag=1 (overrides --workload)")
    g.add_argument("--input-tokens", help="override the input size: N, LO-HI, or sizes A,B,C (each request "
                                           "takes one, interleaved), the whole prompt as the server counts it "
                                           "(usage.prompt_tokens)")
    g.add_argument("--output-tokens", help="override max_tokens: N or LO-HI (the length each request produces: "
                                            "ignore_eos is sent, see --no-ignore-eos)")
    g.add_argument("--no-ignore-eos", action="store_true",
                   help="do not send vLLM's ignore_eos (for servers that refuse unknown fields): a model's EOS can "
                        "then end a stream before --output-tokens; the summary counts those")
    g.add_argument("--no-keep-alive", action="store_true",
                   help="a new connection per request (`Connection: close`), for a server that closes connections "
                        "it promised to keep: llama.cpp's llama-server after every stream (docs/engines.md)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--replay", metavar="FILE", help="JSONL of OpenAI request bodies (with optional timestamp)")
    g.add_argument("--replay-speed", type=float, metavar="X",
                   help="replay at the log's own timing (its timestamps), X times faster; needs timestamps")
    g.add_argument("--scrub", action="store_true",
                   help="replay: redact secrets and personal data (Authorization/API-key headers, e-mails, phone, "
                        "ID-card and card numbers, IPs) from every request before it is sent or stored; the summary "
                        "gives counts per kind, never values")
    g.add_argument("--replay-filter", metavar="FILTER",
                   help="replay only matching lines, e.g. 'status=400,5xx error_code=context_length_exceeded "
                        "min_input_tokens=10 max_input_tokens=2000' (status and error code: as logged); the rest "
                        "are counted as filtered, never as lost")
    g.add_argument("--model", help="model id (default: the first one GET /v1/models lists)")
    g.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    g.add_argument("--no-stream", action="store_true", help="send non-streamed requests")
    g.add_argument("--tokenizer", default="auto", choices=["auto", "byte", "estimate"],
                   help="exact byte-level counts (the reference server) or ~4 bytes/token estimates")
    g.add_argument("--seed", type=int, default=0, help="the same seed sends the same requests")
    g = p.add_argument_group("how much (always bounded in time)")
    g.add_argument("--users", type=int, help="fixed number of users (closed loop)")
    g.add_argument("--spawn-rate", type=float, help="users started per second (default: all in 1 s)")
    g.add_argument("--steps", help="user steps held for --step-duration each, e.g. 10,50,100,200,500")
    g.add_argument("--ramp", metavar="START:END", help="grow users linearly over --duration")
    g.add_argument("--rate", help="open loop: arrivals per second; several (5,10,20) are steps")
    g.add_argument("--poisson", action="store_true", help="Poisson arrivals instead of evenly spaced")
    g.add_argument("--max-users", type=int, default=256, help="open loop: most requests in flight")
    g.add_argument("--duration", default="60s", help="run time for --users, --ramp and a single --rate")
    g.add_argument("--step-duration", default="30s", help="time each step is held")
    g.add_argument("--max-requests", type=int, help="stop after this many requests")
    g.add_argument("--stop-timeout", default="10s", help="how long in-flight requests may finish at the end")
    g = p.add_argument_group("client behaviour")
    g.add_argument("--timeout-connect", default="10s")
    g.add_argument("--timeout-first-token", default="60s", help="a duration, or auto (1.5 x measured P99)")
    g.add_argument("--timeout-total", default="300s", help="a duration, or auto (1.5 x measured P99)")
    g.add_argument("--retries", type=int, default=0, help="retries (at most 2 is the seed's advice) with "
                                                          "exponential backoff, honouring Retry-After")
    g.add_argument("--think-time", default="0s", help="pause between a user's requests")
    g = p.add_argument_group("output")
    g.add_argument("--out", help="output directory (default reports/load-<UTC time>)")
    g.add_argument("--workers", type=int, default=0, help="run a Locust master and N workers on loopback")
    g.add_argument("--ui", type=int, nargs="?", const=8089, metavar="PORT",
                   help="serve Locust's web UI on 127.0.0.1:PORT while running")
    g.add_argument("--interval", type=float, default=5.0, help="seconds between live summary lines")
    p.set_defaults(func=cmd_load)


def replay_options(scrub: bool, filter_text: str | None):
    from ..replay import ReplayFilter
    from ..load.replay.opts import ReplayOptions

    flt = ReplayFilter.parse(filter_text) if filter_text else None
    return ReplayOptions(bool(scrub), flt.to_dict() if flt else None)


def _timeout(text):
    return "auto" if text == "auto" else parse_duration(text)


def build_config(a, target: str | None = None) -> LoadConfig:
    """target: the URL to aim at instead of a.target (a target file's placeholder until it is up)."""
    if (a.scrub or a.replay_filter) and not a.replay:
        raise ValueError("--scrub and --replay-filter apply to a replay: give --replay FILE")
    if a.replay:
        opts = replay_options(a.scrub, a.replay_filter)
        specs = [(WorkloadSpec("replay", replay_file=a.replay, temperature=a.temperature, extra=opts.extra()),
                  1.0)]
    else:
        mix = parse_mix(a.mix) if a.mix else [(a.workload, 1.0)]
        specs = [(WorkloadSpec(name, input_tokens=a.input_tokens, output_tokens=a.output_tokens,
                               temperature=a.temperature), w) for name, w in mix]
    if a.replay_speed and not a.replay:
        raise ValueError("--replay-speed needs --replay FILE")
    if a.replay_speed:
        from ..load.replay.log import scan_replay

        scan = scan_replay(a.replay, options=opts)  # the first lines only: a log is streamed, never read whole
        if not scan.timed:
            raise ValueError(f"{a.replay}: --replay-speed needs a numeric 'timestamp' on every line (the first "
                             f"{scan.checked} were checked)")
    chosen = [x for x in SHAPES if getattr(a, x)]
    if len(chosen) > 1:
        raise ValueError(f"choose one load shape, not {' and '.join('--' + c.replace('_', '-') for c in chosen)}")
    plan = plan_from({
        "users": a.users, "steps": [int(x) for x in a.steps.split(",")] if a.steps else None, "ramp": a.ramp,
        "rate": [float(x) for x in a.rate.split(",")] if a.rate else None, "replay_speed": a.replay_speed,
        "duration": a.duration, "step_duration": a.step_duration, "spawn_rate": a.spawn_rate,
        "poisson": a.poisson, "max_users": a.max_users, "max_requests": a.max_requests,
        "stop_timeout": a.stop_timeout})
    out = a.out or os.path.join("reports", time.strftime("load-%Y%m%dT%H%M%SZ", time.gmtime()))
    return LoadConfig(target=target or a.target, plan=plan, workload=specs, out_dir=out, model=a.model, seed=a.seed,
                      tokenizer=a.tokenizer, stream=not a.no_stream,
                      timeouts=Timeouts(parse_duration(a.timeout_connect), _timeout(a.timeout_first_token),
                                        _timeout(a.timeout_total)),
                      retries=a.retries, api_key_env=a.api_key_env, think_time=parse_duration(a.think_time),
                      workers=a.workers, ui_port=a.ui, ignore_eos=not a.no_ignore_eos,
                      keep_alive=not a.no_keep_alive)


def aim(cfg: LoadConfig, r) -> None:
    """Point cfg at a reached target file (chaos.plan.reach.Reached): its fronts, model, key and limits."""
    cfg.target, cfg.also = r.base_url, r.urls[1:]
    cfg.model = cfg.model or r.model or None
    cfg.api_key_env = r.api_key_env or cfg.api_key_env
    take_target(cfg, r.spec, r.target)
    cfg.limits = r.limits


def drive(a, cfg: LoadConfig):
    print(f"load: {cfg.plan.kind} plan, {len(cfg.plan.stages)} step(s), {cfg.plan.duration:.0f}s; "
          f"writing to {cfg.out_dir}", flush=True)
    return run_load(cfg, progress=lambda line: print(line, flush=True), interval=a.interval)


def _sampled(a, cfg):
    """The load, with the host sampled beside it into host.jsonl (chaos.host): `chaos report --compare` shows
    each run's host and warns where they differed."""
    from ..host import HOST_FILE, HostSampler

    os.makedirs(cfg.out_dir, exist_ok=True)
    sampler = HostSampler(os.path.join(cfg.out_dir, HOST_FILE)).start()
    try:
        return drive(a, cfg)
    finally:
        sampler.stop()


@handled
def cmd_load(a) -> int:
    from .reach import is_url, reached

    file = not is_url(a.target)
    try:
        # a ValueError is a flag's (--duration, --var...), an OSError the output folder's or a file's named
        with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
            variables = parse_vars(a.var)
            if variables and not file:
                raise ValueError("--var sets a target file's variables; the target here is a URL")
            cfg = build_config(a, "http://127.0.0.1:9" if file else None)  # aim() replaces a file's placeholder
            if file:
                with reached(a.target, variables, os.path.join(cfg.out_dir, "target"),
                             lambda line: print(line, flush=True)) as r:
                    aim(cfg, r)
                    if r.limits is not None:
                        print(f"limits of {r.name}: {r.limits.describe()}", flush=True)
                    result = _sampled(a, cfg)
            else:
                result = _sampled(a, cfg)
    except KeyboardInterrupt:  # while the target file's target started: reached() has stopped it
        print("interrupted: the target was stopped", file=sys.stderr)
        return 130
    print()
    print(f"target {cfg.target}  model {result.model}  token counts: "
          f"{'exact (byte-level tokenizer)' if result.tokenizer == 'byte' else 'estimated (~4 bytes a token)'}")
    print(result.table())
    for n in result.notes:
        print(f"note: {n}")
    print(f"\nrecords: {result.records_path}\nsummary: {os.path.join(result.out_dir, 'summary.json')}")
    if result.interrupted:
        return 130
    if result.replay_lost:
        print(f"error: replay incomplete, not sent: {result.replay_lost} requests of the log window (why: the "
              f"first lines of the summary above)", file=sys.stderr)
        return 1
    return 0 if result.locust_rc in (0, 1) else 2
