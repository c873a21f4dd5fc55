"""The `chaos` command."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from . import __version__

# Which module registers each command. `chaos reference serve` (every replica start) imports only its own.
COMMANDS = {"init": "chaos.scaffold", "run": "chaos.run.cli", "validate": "chaos.run.cli", "list": "chaos.run.cli",
            "schema": "chaos.run.cli", "recover": "chaos.run.cli", "targets": "chaos.run.cli",
            "load": "chaos.plan.loadcli", "reference": "chaos.reference.cli", "selftest": "chaos.selftest.cli",
            "proxy": "chaos.proxy.cli", "replay": "chaos.plan.replaycli", "report": "chaos.report.cli", "gate": "chaos.gate.cli",
            "gameday": "chaos.gameday.cli", "export": "chaos.export.cli",
            "sweep": "chaos.plan.cli", "capacity": "chaos.plan.cli", "compare": "chaos.plan.cli"}


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Examples kept as written; an option's default said once, where it says something: not after a help text
    that already says its default, not for None or a flag's False, not for an empty list."""

    def _get_help_string(self, action):
        text = action.help or ""
        nothing = action.default is None or action.default is False or action.default is argparse.SUPPRESS \
            or (isinstance(action.default, (list, tuple)) and not action.default)  # a 0 is still said
        if "%(default)" in text or "default" in text.lower() or nothing:
            return text
        return super()._get_help_string(action)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (only=COMMAND) just what that command needs."""
    parser = argparse.ArgumentParser(
        prog="chaos", formatter_class=Formatter,
        description="Chaos engineering and fault injection for LLM inference services.",
        epilog="examples:\n"
               "  chaos run experiments/kill-instance.yaml       # one experiment, start to report\n"
               "  chaos init --base-url http://127.0.0.1:8000/v1  # a target and first experiments for your endpoint\n"
               "  chaos validate experiments/*.yaml\n"
               "  chaos reference serve --port 8000            # the bundled OpenAI-compatible server\n"
               "  chaos reference demo                         # start one, stream a few requests, stop it\n"
               "  chaos load http://127.0.0.1:8000 --workload rag --users 50 --duration 60s\n"
               "  chaos selftest hostile                       # hostile input: every count must stay 0\n"
               "  chaos selftest interrupts                    # runs interrupted at random: nothing left behind\n"
               "  chaos proxy serve --port 8474                # a Toxiproxy-compatible fault proxy\n"
               "  chaos report reports/kill-instance-20261204T120000Z   # re-render a run's reports\n"
               "  chaos report --compare RUN_A RUN_B           # B against A, figure by figure, with the noise\n"
               "  chaos export experiments/kill-instance.yaml --to chaos-mesh --service vllm   # for Kubernetes\n"
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
    _take_sigint()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `chaos list experiments | head`: the reader left; no traceback for it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _take_sigint() -> None:
    """A command started in the background by a shell without job control (`cmd &`, nohup, some schedulers)
    inherits SIGINT ignored, and then `kill -INT` would not stop it, nor roll back what it did. Only a signal sent
    to it on purpose can reach a background process, and every command here takes SIGINT as "stop cleanly, undo
    what you did", so each takes it, as `chaos run` always did with a handler of its own."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


if __name__ == "__main__":
    sys.exit(main())
