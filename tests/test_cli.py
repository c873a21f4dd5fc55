"""chaos/cli.py: the command line's help says each default once, where it says something."""

import argparse
import re

from chaos.cli import build_parser


def _helps(parser: argparse.ArgumentParser, name: str = "chaos"):
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _helps(p, f"{name} {sub}")


def test_no_help_says_a_default_of_nothing_or_says_its_default_twice():
    seen = dict(_helps(build_parser()))
    assert len(seen) > 25 and "chaos selftest hostile" in seen and "chaos proxy serve" in seen
    for name, text in seen.items():
        flat = " ".join(text.split())
        assert not re.search(r"\(default: (None|False|\[\])\)", flat), name
        for line in re.split(r"\n  (?=-)", text):
            assert len(re.findall(r"\(default", line)) <= 1, (name, line)
    init = " ".join(seen["chaos init"].split())
    assert "(default: from the URL's host and port)" in init and "host and port) (default" not in init
    assert "(default: .)" in init  # a default worth saying is still said
    assert "(default: 0)" in " ".join(seen["chaos gameday"].split())  # a 0 too: it is not None or False
