"""`chaos init`: what it asks, what it refuses, and that what it writes validates and runs against a real
OpenAI-compatible server (the reference server standing in for the user's endpoint)."""

import argparse
import os
import subprocess
import sys

import pytest

from chaos import scaffold
from chaos.scaffold import InitError, settle, write

from .run.test_runs import chaos_run, skip_if_not_judged


def args(**kw):
    base = {"dir": ".", "base_url": None, "model": None, "key_env": None, "name": None, "allow_remote": False,
            "force": False}
    return argparse.Namespace(**{**base, **kw})


def chaos(*argv, cwd=None, timeout=240, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, "-m", "chaos", *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, stdin=stdin)


def test_flags_alone_settle_every_value():
    plan = settle(args(base_url="http://127.0.0.1:8000/v1/", model="m", key_env="MY_KEY"), ask=None)
    assert plan.pop("evidence")
    assert plan == {"base_url": "http://127.0.0.1:8000/v1", "model": "m", "key_env": "MY_KEY", "name": "local-8000",
                    "remote": False, "engine": "unknown"}


def test_a_remote_url_is_refused_unless_confirmed():
    with pytest.raises(InitError, match="not a loopback address: give --allow-remote"):
        settle(args(base_url="https://api.example.com/v1", model="m"), ask=None)
    with pytest.raises(InitError, match="allow-remote"):  # asked, and not confirmed
        settle(args(base_url="https://api.example.com/v1", model="m"), ask=lambda prompt, default: "no")
    asked = []
    plan = settle(args(base_url="https://api.example.com/v1", model="m"),
                  ask=lambda prompt, default: asked.append(prompt) or ("yes" if "billed" in prompt else default))
    assert plan["remote"] and plan["name"] == "example" and any("billed" in p for p in asked)
    assert settle(args(base_url="https://api.example.com/v1", model="m", allow_remote=True), ask=None)["remote"]


def test_a_remote_endpoint_is_never_asked_for_its_models(monkeypatch):
    def no_request(*a):
        raise AssertionError("chaos init sent a request to a remote endpoint")

    monkeypatch.setattr(scaffold, "_models", no_request)
    with pytest.raises(InitError, match="give --model"):
        settle(args(base_url="https://api.example.com/v1", allow_remote=True), ask=None)


def test_missing_or_bad_values_say_what_to_give():
    with pytest.raises(InitError, match="give --base-url"):
        settle(args(), ask=None)
    with pytest.raises(InitError, match="not an http"):
        settle(args(base_url="127.0.0.1:8000"), ask=None)
    with pytest.raises(InitError, match="not an environment variable name"):
        settle(args(base_url="http://127.0.0.1:1/v1", model="m", key_env="sk-abc123"), ask=None)
    with pytest.raises(InitError, match="lowercase letters"):
        settle(args(base_url="http://127.0.0.1:1/v1", model="m", name="My Endpoint"), ask=None)
    with pytest.raises(InitError, match="give --model"):  # nothing listens on port 1: no /models to ask
        settle(args(base_url="http://127.0.0.1:1/v1"), ask=None)


def test_prompts_take_the_answers_and_defaults():
    answers = {"base URL": "http://localhost:9000/v1", "environment variable": "", "model": "qwen",
               "short name": ""}

    def ask(prompt, default):
        return next((v for k, v in answers.items() if prompt.startswith(k) or k in prompt), "") or default

    plan = settle(args(), ask=ask)
    assert plan.pop("evidence")
    assert plan == {"base_url": "http://localhost:9000/v1", "model": "qwen", "key_env": "", "name": "local-9000",
                    "remote": False, "engine": "unknown"}


def test_it_never_overwrites_without_force(tmp_path):
    plan = settle(args(base_url="http://127.0.0.1:8000/v1", model="m"), ask=None)
    write(plan, str(tmp_path), force=False)
    with pytest.raises(InitError, match="exist: give --force"):
        write(plan, str(tmp_path), force=False)
    assert len(write(plan, str(tmp_path), force=True)) == 3


def test_without_a_terminal_a_missing_value_is_an_error_not_a_prompt(tmp_path):
    r = chaos("init", str(tmp_path), "--model", "m")
    assert r.returncode == 2 and "give --base-url" in r.stderr and not os.listdir(tmp_path)


@pytest.mark.slow
def test_what_it_writes_validates_and_runs_against_an_endpoint(tmp_path, vendor):
    """The endpoint's model is found from its GET /models; the key variable is written, never a key."""
    r = chaos("init", str(tmp_path), "--base-url", vendor.base_url + "/v1", "--name", "mine", "--key-env", "MINE_KEY")
    assert r.returncode == 0, r.stdout + r.stderr
    target = (tmp_path / "targets" / "mine.yaml").read_text()
    assert "api_key_env: MINE_KEY" in target and "model: ${MINE_MODEL:-chaos-reference}" in target
    assert "allow_remote" not in target
    # the engine recognised from its GET /v1/models, and the setting that suits it written
    assert "# Engine: reference (GET /models: owned_by llm-chaos)." in target and "ignore_eos: true" in target
    assert "chaos run experiments/mine-baseline.yaml" in r.stdout
    files = ["targets/mine.yaml", "experiments/mine-baseline.yaml", "experiments/mine-rate-limited.yaml"]
    v = chaos("validate", *files, cwd=tmp_path)
    assert v.returncode == 0 and v.stdout.count(": ok") == 3, v.stdout + v.stderr
    assert chaos("run", files[2], "--dry-run", cwd=tmp_path).returncode == 0
    run_dir = tmp_path / "run"
    key = "sk-init-test-4b1d9e"
    r = chaos_run(tmp_path / files[1], run_dir, "--var", "LOAD_FOR=8s", env={"MINE_KEY": key})
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "mine-baseline: PASSED" in r.stdout and (run_dir / "report.html").exists()
    assert not [p for p in run_dir.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
