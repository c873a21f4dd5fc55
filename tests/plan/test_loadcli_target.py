"""`chaos load TARGET` with a target file: the file's target (a real tiny reference replica) is started, loaded
and stopped by the command; --var gives the file's variables; mistakes are refused before anything starts."""

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
ONE_REPLICA = "kind: reference\nname: one-tiny\nreplicas: 1\npreset: ${PRESET:-small}\nstartup_timeout: 60s\n"


def chaos_load(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "chaos", "load", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def serving(port: int) -> list[int]:
    """pids of processes whose command line serves this port (our replica, if it outlived the command)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "serve" in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1:cmd.index("--port") + 2] == [str(port)]:
            out.append(p.info["pid"])
    return out


@pytest.mark.slow
def test_a_target_file_is_started_loaded_and_stopped(tmp_path):
    f = tmp_path / "one.yaml"
    f.write_text(ONE_REPLICA)
    out = tmp_path / "out"
    p = chaos_load(f, "--var", "PRESET=tiny", "--users", "2", "--duration", "5s", "--max-requests", "6",
                   "--output-tokens", "8", "--out", out)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    m = re.search(r"target one-tiny is up at http://127\.0\.0\.1:(\d+)", p.stdout)
    assert m and "stopping the target one-tiny" in p.stdout, p.stdout
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    assert len(records) == 6 and all(r["outcome"] == "ok" for r in records)
    assert all(r["served_by"] == "r0" for r in records)  # the file's replica answered, not something else
    assert serving(int(m.group(1))) == [], "the replica outlived chaos load"
    assert (out / "target" / "replica-r0.log").exists()


def test_var_is_for_a_file_and_must_be_name_value(tmp_path):
    p = chaos_load("http://127.0.0.1:9", "--var", "PRESET=tiny", "--out", tmp_path / "a", timeout=60)
    assert p.returncode == 2 and "--var sets a target file's variables; the target here is a URL" in p.stderr
    f = tmp_path / "one.yaml"
    f.write_text(ONE_REPLICA)
    p = chaos_load(f, "--var", "PRESET", "--out", tmp_path / "b", timeout=60)
    assert p.returncode == 2 and "--var 'PRESET': write NAME=VALUE" in p.stderr


def test_an_invalid_file_is_refused_with_its_position_before_anything_starts(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kind: reference\npreset: ${PRESET:-small}\nreplicas: 99\n")
    p = chaos_load(f, "--var", "PRESET=tiny", "--out", tmp_path / "out", timeout=60)
    assert p.returncode == 2 and f"{f}:3:11: replicas" in p.stderr and "is not a valid target file" in p.stderr
    assert "starting the target" not in p.stdout


def test_help_teaches_the_file_form():
    p = subprocess.run([sys.executable, "-m", "chaos", "load", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert "--var PRESET=tiny" in p.stdout and "targets/vendors/" in p.stdout


def test_a_replay_against_a_target_file_takes_its_switches(tmp_path):
    """`chaos replay LOG TARGET-FILE` loads as `chaos run` does: the file's keep_alive and ignore_eos, how its
    replicas count tokens, and which replica each URL is when no gateway fronts them."""
    from chaos.cli import build_parser
    from chaos.experiment.model import load_target
    from chaos.plan.replaycli import _config, _prepare
    from chaos.targets import make_target

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}) + "\n")
    target_file = tmp_path / "t.yaml"
    target_file.write_text('kind: stack\nmodel: m\nreplicas: 2\nkeep_alive: false\nignore_eos: false\n'
                           'replica:\n  command: ["{python}", -m, http.server, "{port}"]\n  engine: reference\n')
    a = build_parser().parse_args(["replay", str(log), str(target_file)])
    opts, window, _ = _prepare(a)
    spec, _ = load_target(str(target_file))
    target = make_target(spec, str(tmp_path))
    cfg = _config(a, opts, window, target.urls, "m", None, str(tmp_path / "out"), target, spec)
    assert (cfg.keep_alive, cfg.ignore_eos, cfg.tokenizer, cfg.host_ids) == (False, False, "byte", ["r0", "r1"])
    url = _config(a, opts, window, ["http://127.0.0.1:9"], "m", None, str(tmp_path / "out"))
    assert (url.keep_alive, url.ignore_eos, url.tokenizer, url.host_ids) == (True, True, "auto", [])
