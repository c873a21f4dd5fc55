"""`chaos reference serve` and `chaos reference demo`."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER, command_group, is_loopback, parse_duration
from ..errors import InputError, SetupError, counts_as, handled
from .config import DEFAULT_PRESET, PRESETS


def remote_host_error(host: str) -> str | None:
    """Why host must not be listened on without --allow-remote; None for a loopback address."""
    if is_loopback(host):
        return None
    return (f"refusing to listen on {host!r}: it is not a loopback address, so this API (and, with fault hooks, "
            f"the routes that hang or kill the process) would be reachable from other machines. Listen on "
            f"127.0.0.1, or pass --allow-remote if that is what you want.")


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def register(sub, formatter) -> None:
    rsub = command_group(sub, "reference", "reference_command", formatter_class=formatter,
                         help="the bundled reference inference server",
                         description="The bundled reference inference server: paged KV cache, continuous "
                                     "batching, prefix caching, an OpenAI-compatible API.")

    serve = rsub.add_parser(
        "serve", formatter_class=formatter, help="serve the OpenAI-compatible API",
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics.\n"
                    "SIGTERM drains: /health turns 503, new requests get 503, in-flight streams finish\n"
                    "(up to --drain-timeout), then the process exits 0.",
        epilog="examples:\n"
               "  chaos reference serve --port 8000 --replica-id r0\n"
               "  chaos reference serve --port 0 --preset tiny          # a free port, printed when ready\n"
               "  CHAOS_FAULT_TOKEN=s3cret chaos reference serve --enable-fault-hooks --port 8001\n"
               "  curl -s localhost:8001/admin/faults -H content-type:application/json \\\n"
               "       -H x-chaos-fault-token:s3cret -d '{\"step_delay_ms\": 50}'   # slow every engine step\n"
               "  curl -s -X DELETE localhost:8001/admin/faults -H x-chaos-fault-token:s3cret  # revert every hook")
    g = serve.add_argument_group("network")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless --allow-remote)")
    g.add_argument("--allow-remote", action="store_true", help="allow a --host that is not a loopback address")
    g.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one")
    g.add_argument("--header-timeout", type=_seconds, default=10.0, metavar="DURATION",
                   help="a request's headers must arrive within this (slowloris); else 408 and the connection closes")
    g.add_argument("--body-timeout", type=_seconds, default=30.0, metavar="DURATION",
                   help="a request's body must arrive within this of its headers; else 408")
    g.add_argument("--replica-id", default="r0", help="name in x-served-by and system_fingerprint")
    g.add_argument("--model-name", default="chaos-reference", help="model id clients must send")
    g = serve.add_argument_group("model")
    g.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS), help="model size")
    g.add_argument("--checkpoint", metavar="DIR", help="local config.json + *.safetensors of the same architecture")
    g.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    g.add_argument("--device", default="cpu", help="auto, cpu or cuda[:N]")
    g.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="float32 keeps greedy output independent of the batch; bfloat16 is ~2x faster batched "
                        "on CPUs with AMX (see BENCHMARKS.md) but greedy output may then change with the batch")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    g.add_argument("--decode-kernel", default="auto", choices=["auto", "torch", "triton"],
                   help="decode attention: triton reads the paged cache in place (CUDA); torch gathers it "
                        "first (any device); auto picks triton on CUDA when it imports")
    g.add_argument("--enforce-eager", action="store_true",
                   help="on CUDA, run every step eagerly instead of replaying decode steps from CUDA graphs")
    g = serve.add_argument_group("engine")
    g.add_argument("--max-model-len", type=int, default=0, help="context limit (0: the model's)")
    g.add_argument("--block-size", type=int, default=16, help="tokens per KV-cache block")
    g.add_argument("--num-kv-blocks", type=int, default=0, help="KV-cache blocks (0: sized from --kv-cache-mb)")
    g.add_argument("--kv-cache-mb", type=int, default=512, help="memory for the KV cache when --num-kv-blocks is 0")
    g.add_argument("--max-num-seqs", type=int, default=64, help="most sequences in one batch")
    g.add_argument("--max-num-batched-tokens", type=int, default=512,
                   help="token budget of one step; longer prompts are prefilled in chunks")
    g.add_argument("--no-prefix-caching", action="store_true", help="turn prefix caching off")
    g.add_argument("--step-slowdown", type=float, default=1.0, metavar="FACTOR",
                   help="every engine step takes FACTOR x its own time (1-10): a slower build, for trying the gate")
    g = serve.add_argument_group("build changes", "what canary analysis misses, for trying the gate (docs/gate.md); "
                                                  "each a seeded draw, off by default")
    g.add_argument("--stall-fraction", type=float, default=0.0, metavar="SHARE",
                   help="this share (0-1) of engine steps stall for --stall-ms before their tokens go out: the "
                        "median request never meets one, the tail does")
    g.add_argument("--stall-ms", type=float, default=0.0, metavar="MS", help="how long a stalled step waits")
    g.add_argument("--pace-spread", type=float, default=0.0, metavar="SIGMA",
                   help="each request draws a pace factor, log-normal with median 1 and log-sd SIGMA (0-2); one "
                        "above 1 stretches the request's whole timeline by it (below 1 leaves it as it was): "
                        "half the requests unchanged, the other half spread wider")
    g.add_argument("--error-fraction", type=float, default=0.0, metavar="SHARE",
                   help="answer this share (0-1) of prompts with HTTP 500, chosen by a hash of --build-seed and "
                        "the prompt: the same prompt fails on every replica, so a gateway's retry cannot hide it")
    g.add_argument("--build-seed", type=int, default=0, help="seed of the stalls', paces' and errors' draws")
    g = serve.add_argument_group("admission and shutdown")
    g.add_argument("--max-waiting", type=int, default=256, help="queued requests beyond this are refused")
    g.add_argument("--overload-status", type=int, default=429, choices=[429, 503], help="status when refused")
    g.add_argument("--retry-after", type=float, default=1.0, help="seconds in Retry-After when refused")
    g.add_argument("--default-max-tokens", type=int, default=256, help="max_tokens of chat requests without one")
    g.add_argument("--drain-timeout", type=float, default=30.0, help="seconds SIGTERM waits for in-flight requests")
    g = serve.add_argument_group("fault hooks")
    g.add_argument("--enable-fault-hooks", action="store_true",
                   help="serve /admin/faults: step_delay_ms, step_slowdown, hang_s, kv_block_cap, fail_fraction, "
                        "engine_error, "
                        f"crash; every call needs the header {FAULT_TOKEN_HEADER} with the value of {FAULT_TOKEN_ENV}")
    g.add_argument("--fault-seed", type=int, help="seed of fail_fraction's coin")
    serve.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=cmd_serve)

    gw = rsub.add_parser(
        "gateway", formatter_class=formatter, help="a resilient gateway in front of replicas",
        description="OpenAI-compatible front over N primary replicas: least-outstanding balancing, active health\n"
                    "checks and outlier ejection, per-attempt timeouts, at most --retries retries with backoff\n"
                    "(only before anything streamed), a circuit breaker per replica, and a fallback chain:\n"
                    "backup replicas, then a cached answer for a repeated request, then 503 with Retry-After.\n"
                    "A client's 4xx passes through unretried and counts against no replica; when every replica\n"
                    "says it is busy (429) the client gets 429 with the soonest Retry-After; a request that two\n"
                    "replicas answer 5xx (a poison request) goes back to its client. x-served-by names the\n"
                    "path: the replica id, backup, or cache. docs/gateway.md has every rule and setting.",
        epilog="example:\n"
               "  chaos reference gateway --port 9000 --upstream r0=http://127.0.0.1:8000 \\\n"
               "      --upstream r1=http://127.0.0.1:8001 --backup b0=http://127.0.0.1:8100 --retries 2")
    gw.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback unless --allow-remote)")
    gw.add_argument("--allow-remote", action="store_true", help="allow a --host that is not a loopback address")
    gw.add_argument("--port", type=int, default=9000, help="0 picks a free one")
    gw.add_argument("--header-timeout", type=_seconds, metavar="DURATION",
                    help="a client's headers must arrive within this (default 10s); else 408, connection closed")
    gw.add_argument("--body-timeout", type=_seconds, metavar="DURATION",
                    help="a client's body must arrive within this of its headers (default 30s); else 408")
    gw.add_argument("--upstream", action="append", default=[], metavar="NAME=URL", help="a primary replica")
    gw.add_argument("--backup", action="append", default=[], metavar="NAME=URL", help="a backup (fallback) replica")
    gw.add_argument("--retries", type=int, default=2)
    gw.add_argument("--first-token-timeout", default="auto", help="seconds, or auto (1.5 x measured P99)")
    gw.add_argument("--total-timeout", default="120", help="seconds, or auto")
    gw.add_argument("--max-concurrency", type=int, default=256)
    gw.add_argument("--max-queue", type=int, default=512)
    gw.add_argument("--settings", default="{}", help="JSON object of any other gateway setting")
    gw.add_argument("--drain-timeout", type=float, default=30.0)
    gw.set_defaults(func=cmd_gateway)

    demo = rsub.add_parser("demo", formatter_class=formatter, help="start a server, stream requests, stop it",
                           description="Start a reference server on a free loopback port, stream a few "
                                       "concurrent chat requests through it with the openai client, print what "
                                       "came back and the server's metrics, then stop it with SIGTERM.")
    demo.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    demo.add_argument("--requests", type=int, default=8, help="concurrent streaming requests")
    demo.add_argument("--max-tokens", type=int, default=64)
    demo.set_defaults(func=cmd_demo)


def engine_config_from(args):
    from .builds import BuildChanges
    from .config import EngineConfig, ModelConfig, preset

    if args.checkpoint:
        model = ModelConfig.from_checkpoint(args.checkpoint)
    else:
        model = preset(args.preset)
        model.seed = args.seed
    return EngineConfig(model=model, max_model_len=args.max_model_len, block_size=args.block_size,
                        num_kv_blocks=args.num_kv_blocks, kv_cache_memory_mb=args.kv_cache_mb,
                        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                        enable_prefix_caching=not args.no_prefix_caching, device=args.device, dtype=args.dtype,
                        num_threads=args.threads, checkpoint=args.checkpoint, decode_kernel=args.decode_kernel,
                        enforce_eager=args.enforce_eager, step_slowdown=args.step_slowdown,
                        build=BuildChanges(stall_fraction=args.stall_fraction, stall_ms=args.stall_ms,
                                           pace_spread=args.pace_spread, error_fraction=args.error_fraction,
                                           seed=args.build_seed))


@handled
def cmd_serve(args) -> int:
    if not args.allow_remote and (why := remote_host_error(args.host)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.enable_fault_hooks and not os.environ.get(FAULT_TOKEN_ENV):  # before the model loads: fail fast
        print(f"error: --enable-fault-hooks needs a token: set the environment variable {FAULT_TOKEN_ENV} to a "
              f"secret value, and send it as the header {FAULT_TOKEN_HEADER} on /admin/faults", file=sys.stderr)
        return 2
    # Before torch loads libgomp: spin less while waiting. With the default spin count a replica that shares
    # its cores (other replicas, Locust, a gateway) slows ~30x; 10k spins cost ~5% when it has them alone.
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .api import ServerSettings
    from .server import run

    # A flag's ValueError or a checkpoint that is not there is the user's to fix; a RuntimeError (the device, the
    # engine, the port: ServeError) the setup's. Either way what it says is said, and the exit is 2.
    with counts_as(InputError, ValueError, FileNotFoundError), counts_as(SetupError, RuntimeError):
        config = engine_config_from(args)
        settings = ServerSettings(model_name=args.model_name, replica_id=args.replica_id,
                                  max_waiting=args.max_waiting, overload_status=args.overload_status,
                                  retry_after_s=args.retry_after, default_max_tokens=args.default_max_tokens,
                                  drain_timeout_s=args.drain_timeout, enable_fault_hooks=args.enable_fault_hooks,
                                  fault_seed=args.fault_seed,
                                  fault_token=os.environ.get(FAULT_TOKEN_ENV) if args.enable_fault_hooks else None,
                                  header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout)
        if args.device.startswith("cuda") or args.device == "auto":
            from .engine.model_runner import resolve_device

            config.device = str(resolve_device(args.device))
        return run(settings, config, args.host, args.port)


@handled
def cmd_gateway(args) -> int:
    import json

    from ..common import run_event_loop
    from .gateway.server import parse_upstreams, serve
    from .gateway.settings import GatewaySettings

    def timeout(v):
        return "auto" if v == "auto" else float(v)

    if not args.allow_remote and (why := remote_host_error(args.host)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    with counts_as(InputError, ValueError, TypeError):  # a flag's, or a setting's of the wrong type
        try:
            extra = json.loads(args.settings)
        except ValueError as e:
            raise ValueError(f"--settings is not JSON: {e}") from None
        if not isinstance(extra, dict):
            raise ValueError("--settings must be a JSON object of gateway settings, e.g. '{\"retries\": 1}'")
        for name, v in (("header_timeout_s", args.header_timeout), ("body_timeout_s", args.body_timeout)):
            if v is not None:
                extra.setdefault(name, v)
        settings = GatewaySettings.from_dict({"retries": args.retries, "max_concurrency": args.max_concurrency,
                                              "max_queue": args.max_queue,
                                              "first_token_timeout": timeout(args.first_token_timeout),
                                              "total_timeout": timeout(args.total_timeout), **extra})
        primaries = parse_upstreams(args.upstream, "r")
        backups = parse_upstreams(args.backup, "b")
        if not primaries:
            raise ValueError("give at least one --upstream NAME=URL")
    return run_event_loop(serve(settings, primaries, backups, args.host, args.port, args.drain_timeout))


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.preset, args.requests, args.max_tokens)
