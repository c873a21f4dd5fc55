"""`chaos proxy llm`: the LLM-aware fault proxy standalone, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys

from chaos.common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER, is_loopback, parse_duration, run_event_loop, \
    running_loop_name
from chaos.errors import InputError, SetupError, counts_as, handled

from .effects import EFFECTS

_KIND_TITLES = {"answer": "answer instead of the upstream", "stream": "on the SSE stream",
                "content": "on the text (streamed or not)", "request": "on the request"}


def _effects_help() -> str:
    lines = []
    for kind, title in _KIND_TITLES.items():
        lines.append(f"  {title}:")
        for name, cls in EFFECTS.items():
            if cls.kind == kind:
                lines.append(f"    {name:<18} {cls.help}")
    return "\n".join(lines)


def register(sub, formatter) -> None:
    p = sub.add_parser(
        "llm", formatter_class=formatter,
        help="an HTTP reverse proxy that injects LLM faults (429 storms, stalled/cut streams, corrupted chunks ...)",
        description="An HTTP/1.1 reverse proxy in front of an OpenAI-compatible service (a local server or a vendor,\n"
                    "http:// or https://; a base path such as /api/v3 is kept as a prefix). Requests pass through\n"
                    "untouched, streams token by token, until a fault rule matches them.\n\n"
                    "Rules are set at runtime on the same port, under /__chaos/:\n"
                    "  GET /__chaos/health             200 {\"status\": \"ok\"}\n"
                    "  POST /__chaos/faults RULE       201 the rule (400 names a bad field, 409 the name exists)\n"
                    "  GET /__chaos/faults             the rules with counters matched/applied\n"
                    "  DELETE /__chaos/faults[/NAME]   204; a removed rule stops at once, also on streams in flight\n"
                    f"With {FAULT_TOKEN_ENV} set, every /__chaos/ request but health must carry it in {FAULT_TOKEN_HEADER}.\n\n"
                    "A rule:\n"
                    '  {"name": "storm", "effect": "storm", "params": {"length": 3, "retry_after": 2},\n'
                    '   "match": {"method": "POST", "path": "/v1/chat/*", "model": "m", "stream": true},\n'
                    '   "probability": 0.5, "seed": 1, "occurrences": [2, 4], "count": 10,\n'
                    '   "window": {"start": 5, "end": 60}}\n'
                    "(all but name and effect optional; after_tokens counts chunks that carry text)\n\n"
                    "Effects and their params:\n" + _effects_help(),
        epilog="Each applied fault: header `x-chaos-fault: RULE; EFFECT` on the answer, and one JSON line in --log\n"
               '{"t", "request_id", "fault", "effect", "detail", "method", "path"}.\n\n'
               "examples:\n"
               "  chaos proxy llm --upstream http://127.0.0.1:8000\n"
               "  chaos proxy llm --listen 127.0.0.1:9001 --upstream https://ark.cn-beijing.volces.com/api/v3 "
               "--rules faults.yaml --log faults.jsonl\n"
               "  curl -X POST localhost:9000/__chaos/faults -d '{\"name\": \"s\", \"effect\": \"stall\", "
               "\"params\": {\"after_tokens\": 3, \"for_s\": 10}}'")
    p.add_argument("--listen", default="127.0.0.1:9000", metavar="HOST:PORT",
                   help="where clients connect (port 0 picks a free one)")
    p.add_argument("--allow-remote", action="store_true", help="allow a --listen host that is not loopback")
    p.add_argument("--upstream", required=True, metavar="URL", help="the service behind, e.g. http://127.0.0.1:8000")
    p.add_argument("--log", metavar="PATH", help="append one JSON line per fault applied")
    p.add_argument("--rules", metavar="FILE", help="a JSON or YAML list of rules to load at start")
    p.add_argument("--header-timeout", type=_seconds, default=10.0, metavar="DURATION",
                   help="a request's head must arrive within this (slowloris); else 408 and the connection closes")
    p.add_argument("--body-timeout", type=_seconds, default=30.0, metavar="DURATION",
                   help="a request body the proxy reads whole (up to 4 MB) must arrive within this; else 408")
    p.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: write HOST:PORT, e.g. 127.0.0.1:9000")
    return host.strip("[]") or "127.0.0.1", int(port)


def load_rules(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        rules = json.loads(text)
    except ValueError:
        import yaml
        rules = yaml.safe_load(text)
    if isinstance(rules, dict) and "rules" in rules:
        rules = rules["rules"]
    if not isinstance(rules, list):
        raise ValueError(f"--rules {path}: expected a list of rules (JSON or YAML)")
    return rules


@handled(prefix="chaos proxy llm")  # its errors name it: in a run it writes beside the other processes
def run(args: argparse.Namespace) -> int:
    from .server import LLMProxy

    # a flag's ValueError (a rule's RuleError is one) or KeyError is the user's; an OSError (the --log file) the setup's
    with counts_as(InputError, ValueError, KeyError), counts_as(SetupError, OSError):
        host, port = parse_listen(args.listen)
        if not is_loopback(host) and not args.allow_remote:
            raise ValueError(f"--listen {host} is not a loopback address: anyone who reaches it can inject faults; "
                             "add --allow-remote (and set " + FAULT_TOKEN_ENV + ") if that is what you want")
        proxy = LLMProxy(args.upstream, host, port, token=os.environ.get(FAULT_TOKEN_ENV), log_path=args.log,
                         header_timeout=args.header_timeout, body_timeout=args.body_timeout)
        for spec in load_rules(args.rules) if args.rules else []:
            proxy.add_rule(spec)
    return run_event_loop(_serve(proxy, args.upstream))


async def _serve(proxy, upstream: str) -> int:
    try:
        await proxy.start()
    except OSError as e:
        raise SetupError(f"cannot listen on {proxy.host}:{proxy.port}: {e}") from None  # said by run, exit 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
    print(f"LLM fault proxy listening on http://{host}:{proxy.port} -> {upstream} (event loop {running_loop_name()})",
          flush=True)
    await stop.wait()
    await proxy.stop()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.proxy.llm")
    sub = parser.add_subparsers(dest="cmd", required=True)
    register(sub, argparse.RawDescriptionHelpFormatter)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "llm":
        argv = ["llm", *argv]  # `python -m chaos.proxy.llm --upstream URL` as well as `... llm --upstream URL`
    args = parser.parse_args(argv)
    return args.func(args)
