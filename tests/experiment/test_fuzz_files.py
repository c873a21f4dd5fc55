"""Generated target and suite files (issue 30), as test_fuzz.py does for experiment files: each a valid base (every
target kind; a suite of real experiment files with overrides) with up to three hostile mutations, and abusive YAML
text beside them. For each: no traceback, every refusal at file:line:col, what loads is built as its command
builds it (the target's processes planned, not started; every suite entry's experiment loaded with its target and
variables), and `chaos validate` accepts it exactly when the loader does. CHAOS_FUZZ_EXAMPLES sets how many
(1,000 of each in CI; 10,000 for the long mode)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
from collections import Counter

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from chaos.cli import build_parser
from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_target
from chaos.suite.model import load_suite
from chaos.targets import make_target

from .test_fuzz import EXAMPLES, FUZZ, YAML_ABUSE, mutate

SEEN: Counter = Counter()
# one worker, in file order: SEEN is this process's; generative (~16 s), so with the whole suite, beside the timed
# runs, not in the fast tier
pytestmark = [pytest.mark.slow, pytest.mark.beside, pytest.mark.xdist_group("experiment-fuzz-files")]
PARSER = build_parser(only="validate")
EXPERIMENT = "name: member\ntarget: {kind: reference, replicas: 1, preset: tiny}\nload: {workload: chat, users: 1, " \
             "duration: 5s}\n"


def validate(path: str) -> int:
    """`chaos validate PATH`, in this process (the command's own parser and function)."""
    args = PARSER.parse_args(["validate", path])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return args.func(args)


@st.composite
def targets(draw) -> dict:
    kind = draw(st.sampled_from(["reference", "reference", "process", "docker", "openai"]))
    if kind == "reference":
        t = {"kind": kind, "replicas": draw(st.integers(1, 3)), "preset": "tiny", "startup_timeout": "30s"}
        if draw(st.booleans()):
            t["gateway"] = draw(st.sampled_from([{"retries": 1}, {"retries": 2, "backup": {"replicas": 1,
                                                                                          "preset": "tiny"}},
                                                 {"first_token_timeout": "auto", "eject": {"after_failures": 3,
                                                                                           "for": "5s"}}]))
        if draw(st.booleans()):
            t["links"] = draw(st.lists(st.sampled_from(["client", "r0", "r1", "r2", "gw", "nosuch"]), max_size=3,
                                       unique=True))
        if draw(st.booleans()):
            t["toxiproxy"] = {"url": draw(st.sampled_from(["http://127.0.0.1:8474", "http://10.0.0.1:8474", "x"]))}
    elif kind == "process":
        t = {"kind": kind, "command": draw(st.sampled_from(["serve {port}", "python -m x --port {port}", ""])),
             "replicas": draw(st.integers(1, 3)), "health_path": "/health"}
    elif kind == "docker":
        t = {"kind": kind, "image": "chaos-busybox:latest", "replicas": draw(st.integers(1, 2)),
             "command": ["serve", "{port}"], "model": "m"}
    else:
        t = {"kind": kind, "base_url": draw(st.sampled_from(["http://127.0.0.1:8000/v1", "https://api.x.com/v1",
                                                             "ftp://x"])),
             "model": "m", "api_key_env": draw(st.sampled_from(["OPENAI_API_KEY", "sk-live-abc", "1BAD"]))}
    return {"name": "fuzz-target", "vars": {"P": "tiny"}, **t}


@st.composite
def suites(draw) -> dict:
    entries = []
    for i in range(draw(st.integers(1, 3))):
        e = {"file": draw(st.sampled_from(["member.yaml", "member.yaml", "nosuch.yaml"]))}
        if draw(st.booleans()):
            e["name"] = draw(st.sampled_from([f"m{i}", "m0", "", "x" * 80]))
        if draw(st.booleans()):
            e["vars"] = {"USERS": draw(st.sampled_from([2, "3", "${NOPE}"]))}
        if draw(st.booleans()):
            e["target"] = draw(st.sampled_from(["other-target.yaml", "nosuch.yaml"]))
        if draw(st.booleans()):
            e["stop_on_failure"] = draw(st.booleans())
        entries.append(e)
    return {"name": "fuzz-suite", "vars": {"USERS": 2}, "experiments": entries}


@st.composite
def target_documents(draw) -> dict:
    return mutate(draw, draw(targets()), ["extra", "kind", "name"])


@st.composite
def suite_documents(draw) -> dict:
    return mutate(draw, draw(suites()), ["extra", "file", "name"])


def check(text: str | bytes, tmp: str, role: str) -> str:
    """'accepted' or 'refused', asserting what every file must satisfy."""
    path = os.path.join(tmp, f"{role}.yaml")
    with open(path, "wb") as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    with open(os.path.join(tmp, "member.yaml"), "w") as f:
        f.write(EXPERIMENT)
    with open(os.path.join(tmp, "other-target.yaml"), "w") as f:
        f.write("kind: reference\nreplicas: 1\npreset: tiny\n")
    try:
        if role == "target":
            spec, _ = load_target(path)
            make_target(spec, tmp)  # what `chaos run` and `chaos replay` build before starting anything
        else:
            load_suite(path)
    except ExperimentError as e:
        assert e.problems, text
        bad = [p for p in e.problems if not re.match(r".+\.yaml:\d+:\d+: ", p)]
        assert not bad, (bad, text[:2000] if isinstance(text, str) else text[:200])
        assert validate(path) == 2
        return "refused"
    assert validate(path) == 0, text
    return "accepted"


@FUZZ
@given(target_documents())
def test_generated_target_files_load_or_are_refused_with_a_line(doc):
    with tempfile.TemporaryDirectory() as tmp:
        SEEN["target " + check(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), tmp, "target")] += 1


@FUZZ
@given(suite_documents())
def test_generated_suite_files_load_or_are_refused_with_a_line(doc):
    with tempfile.TemporaryDirectory() as tmp:
        SEEN["suite " + check(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), tmp, "suite")] += 1


@FUZZ
@given(YAML_ABUSE, st.sampled_from(["target", "suite"]))
def test_abusive_yaml_as_a_target_or_suite_is_refused_with_a_line(text, role):
    with tempfile.TemporaryDirectory() as tmp:
        SEEN["yaml " + check(text, tmp, role)] += 1


def test_the_draws_reached_both_sides():
    """Runs after the three above (file order): generators that stopped producing valid files, or invalid ones,
    would make them pass without testing much. Three mutations of a base rarely leave it valid: 8 % of suites
    and 12 % of targets load in CI (1,000 each, derandomized), 4.6 % and 6.8 % of 10,000 drawn at random."""
    if not SEEN:
        pytest.skip("run with the generated tests above")
    for role in ("target", "suite"):
        assert SEEN[f"{role} accepted"] >= EXAMPLES // 40 and SEEN[f"{role} refused"] >= EXAMPLES // 2, SEEN
    assert SEEN["yaml refused"] >= EXAMPLES // 2, SEEN
