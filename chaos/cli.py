"""The `chaos` command."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__

# Which module registers each command. `chaos reference serve` (every replica start) imports only its own.
COMMANDS = {"run": "chaos.run.cli", "validate": "chaos.run.cli", "list": "chaos.run.cli",
            "schema": "chaos.run.cli", "recover": "chaos.run.cli", "targets": "chaos.run.cli",
            "load": "chaos.load.cli", "reference": "chaos.reference.cli", "selftest": "chaos.selftest.hostile",
            "proxy": "chaos.proxy.cli", "replay": "chaos.load.replaycli", "report": "chaos.report.cli", "gate": "chaos.gate.cli",
            "gameday": "chaos.gameday.cli",
            "sweep": "chaos.plan.cli", "capacity": "chaos.plan.cli", "compare": "chaos.plan.cli"}


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (only=COMMAND) just what that command needs."""
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
               "  chaos proxy serve --port 8474                # a Toxiproxy-compatible fault proxy\n"
               "  chaos report reports/kill-instance-20261204T120000Z   # re-render a run's reports\n"
               "  chaos report --compare RUN_A RUN_B           # B against A, figure by figure, with the noise\n"
               "\nRun `chaos COMMAND --help` for the options of each command.")
    parser.add_argument("--version", action="version", version=f"llm-chaos {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(sub, Formatter)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=next((w for w in words if not w.startswith("-")), None))
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
