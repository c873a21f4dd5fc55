"""The CI examples (examples/ci/) are valid workflow files whose chaos commands exist as written: each command line
parses with the real argument parser, and every file it names is in the repository."""

import glob
import os
import shlex
import tomllib

import pytest
import yaml

from chaos.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GITHUB = sorted(glob.glob(os.path.join(ROOT, "examples", "ci", "github", "*.yml")))
GITLAB = [os.path.join(ROOT, "examples", "ci", "gitlab", ".gitlab-ci.yml")]


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def github_commands(doc) -> list[str]:
    return [step["run"] for job in doc["jobs"].values() for step in job["steps"] if "run" in step]


def gitlab_commands(doc) -> list[str]:
    out = list(doc.get("default", {}).get("before_script", []))
    for name, job in doc.items():
        if name != "default" and not name.startswith(".") and isinstance(job, dict):
            out += job.get("before_script", []) + job["script"]
    return out


def chaos_argvs(commands: list[str]) -> list[list[str]]:
    """The argv after `chaos` of every chaos invocation (a line may chain several with &&)."""
    out = []
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            if words and os.path.basename(words[0]) == "chaos":
                out.append(words[1:])
    return out


def test_there_are_examples_for_both():
    assert len(GITHUB) == 2 and all(os.path.exists(p) for p in GITLAB)


@pytest.mark.parametrize("path", GITHUB, ids=os.path.basename)
def test_github_workflow_shape(path):
    doc = load(path)
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on and doc["jobs"], path
    for job in doc["jobs"].values():
        assert job["runs-on"] and job["steps"]
        assert all(("uses" in s) != ("run" in s) for s in job["steps"]), job["steps"]


def test_gitlab_jobs_shape():
    doc = load(GITLAB[0])
    jobs = {k: v for k, v in doc.items() if k != "default" and not k.startswith(".")}
    assert set(jobs) == {"upgrade-gate", "gameday"}
    for job in jobs.values():
        assert job["script"] and job["rules"]


def test_every_chaos_command_parses_and_names_files_that_exist():
    commands = [c for p in GITHUB for c in github_commands(load(p))] + gitlab_commands(load(GITLAB[0]))
    argvs = chaos_argvs(commands)
    assert {a[0] for a in argvs} >= {"gate", "gameday", "validate"}, argvs
    parser = build_parser()
    for argv in argvs:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"`chaos {' '.join(argv)}` does not parse")
        for word in argv:
            if word.endswith((".yaml", ".yml")):
                assert os.path.exists(os.path.join(ROOT, word)), f"{word} (in `chaos {' '.join(argv)}`)"


def test_the_extra_they_install_exists():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    commands = [c for p in GITHUB for c in github_commands(load(p))] + gitlab_commands(load(GITLAB[0]))
    for c in commands:
        if "pip install" in c:
            assert "'.[fast]'" in c and "fast" in extras, c
