"""The `chaos` command."""

from __future__ import annotations

import argparse
import sys

from . import __version__


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaos", formatter_class=Formatter,
        description="Chaos engineering and fault injection for LLM inference services.",
        epilog="examples:\n"
               "  chaos run experiments/kill-instance.yaml       # one experiment, start to report\n"
               "  chaos validate experiments/*.yaml\n"
               "  chaos reference serve --port 8000            # the bundled OpenAI-compatible server\n"
               "  chaos reference demo                         # start one, stream a few requests, stop it\n"
               "  chaos load http://127.0.0.1:8000 --workload rag --users 50 --duration 60s\n"
               "  chaos selftest hostile                       # hostile input: every count must stay 0\n"
               "\nRun `chaos COMMAND --help` for the options of each command.")
    parser.add_argument("--version", action="version", version=f"llm-chaos {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from .load import cli as load_cli
    from .reference import cli as reference_cli
    from .run import cli as run_cli
    from .selftest import hostile as selftest_cli

    run_cli.register(sub, Formatter)
    load_cli.register(sub, Formatter)
    reference_cli.register(sub, Formatter)
    selftest_cli.register(sub, Formatter)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
