"""targets/vendors/*.yaml: each validates when pointed at loopback, a remote one is refused without allow_remote,
and `chaos load` against the OpenAI file (a real tiny reference server standing in on loopback, real Locust) keeps
the file's limits and writes the key nowhere."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_target
from chaos.targets.limits import Limits
from chaos.reference.launcher import start_server

ROOT = Path(__file__).resolve().parents[2]
VENDORS = ROOT / "targets" / "vendors"
REMOTE = {"openai": "OPENAI_API_KEY", "ark": "ARK_API_KEY", "deepseek": "DEEPSEEK_API_KEY"}
LOCAL = {"vllm": "http://127.0.0.1:8000/v1", "sglang": "http://127.0.0.1:30000/v1",
         "ollama": "http://127.0.0.1:11434/v1"}


def test_every_vendor_file_is_there():
    assert sorted(p.stem for p in VENDORS.glob("*.yaml")) == sorted([*REMOTE, *LOCAL])


@pytest.mark.parametrize("name", sorted([*REMOTE, *LOCAL]))
def test_each_validates_at_loopback_and_states_its_limits(name):
    prefix = name.upper()
    spec, _ = load_target(str(VENDORS / f"{name}.yaml"), {f"{prefix}_BASE_URL": "http://127.0.0.1:9/v1",
                                                           f"{prefix}_MODEL": "m"})
    s = spec.settings
    assert (spec.kind, spec.name, s["base_url"], s["model"]) == ("openai", name, "http://127.0.0.1:9/v1", "m")
    assert s.get("api_key_env") == REMOTE.get(name)  # remote vendors read a key; local engines need none
    limits = Limits.from_dict(s["limits"])
    assert limits.max_concurrency and limits.max_output_tokens
    if name in REMOTE:
        assert limits.requests_per_minute and limits.tokens_per_minute and spec.ignore_eos is False
        assert spec.allow_remote is False


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_local_engines_default_to_their_loopback_port(name):
    spec, _ = load_target(str(VENDORS / f"{name}.yaml"))
    assert spec.settings["base_url"] == LOCAL[name]


@pytest.mark.parametrize("name", sorted(REMOTE))
def test_a_remote_vendor_is_refused_until_allow_remote_is_set(name, tmp_path):
    text = (VENDORS / f"{name}.yaml").read_text()
    assert "allow_remote is true. Set it only after reading the limits" in text  # the file tells the user why
    with pytest.raises(ExperimentError) as e:
        load_target(str(VENDORS / f"{name}.yaml"))
    (problem,) = e.value.problems
    assert f"{name}.yaml:" in problem and "is not a loopback address; set allow_remote: true" in problem
    opted_in = tmp_path / f"{name}.yaml"
    opted_in.write_text(text.replace("allow_remote: false", "allow_remote: true"))
    spec, _ = load_target(str(opted_in))  # the flag is all that was missing
    assert spec.allow_remote is True and spec.settings["base_url"].startswith("https://")


def test_limits_are_validated_with_file_positions(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text("kind: openai\nbase_url: http://127.0.0.1:9/v1\nmodel: m\nlimits:\n  requests_per_minute: 0\n"
                 "  tokens_per_min: 5\n")
    with pytest.raises(ExperimentError) as e:
        load_target(str(p))
    text = "\n".join(e.value.problems)
    assert f"{p}:5:24: limits.requests_per_minute: 0 is out of range" in text
    assert f"{p}:6:3: limits.tokens_per_min: unknown key 'tokens_per_min' (did you mean 'tokens_per_minute'?)" in text


RPM = 40  # with 12 users asked for and 8 allowed in flight: each user may start 5 requests a minute (one, then a
# pause of ~12 s): without the pause 8 users start hundreds in the run's 8 s, without the cap 12 are in flight at once


@pytest.fixture(scope="module")
def capped_load(tmp_path_factory):
    """`chaos load targets/vendors/openai.yaml` with 12 users for 8 s at a loopback stand-in."""
    out = tmp_path_factory.mktemp("vendor") / "out"
    key = "sk-chaos-test-" + secrets.token_hex(12)
    with start_server(["--preset", "tiny"]) as server:
        p = subprocess.run([sys.executable, "-m", "chaos", "load", str(VENDORS / "openai.yaml"),
                            "--var", f"OPENAI_BASE_URL={server.base_url}/v1", "--var", "OPENAI_MODEL=chaos-reference",
                            "--var", f"OPENAI_RPM={RPM}", "--users", "12", "--duration", "8s",
                            "--output-tokens", "16-48", "--timeout-first-token", "20s", "--out", str(out)],
                           capture_output=True, text=True, timeout=240, cwd=ROOT,
                           env={**os.environ, "OPENAI_API_KEY": key})
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines() if line.strip()]
    return p, out, key, records


@pytest.mark.slow
def test_the_load_keeps_the_rate_and_concurrency_limits(capped_load):
    p, out, _, records = capped_load
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert any(r["outcome"] == "ok" for r in records), records[:3]
    starts = sorted(r["t_start"] for r in records)
    # every 60 s window (the run is shorter than one: all of it) holds at most the limit; 12 unpaced users on the
    # tiny server send hundreds in 8 s, so this fails without the cap
    assert max(sum(1 for t in starts if s <= t < s + 60) for s in starts) <= RPM
    in_flight = max(sum(1 for r in records if r["t_start"] <= t < (r["t_end"] or r["t_start"])) for t in starts)
    assert in_flight <= 8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["limits"] == {"requests_per_minute": RPM, "tokens_per_minute": 100000, "max_concurrency": 8,
                                 "max_output_tokens": 1024}
    assert any("at most 8 users" in n for n in summary["notes"]), summary["notes"]
    assert f"limits of openai: {RPM} requests/min" in p.stdout and "stopping" not in p.stdout  # nothing to stop


@pytest.mark.slow
def test_the_key_is_in_no_output(capped_load):
    p, out, key, records = capped_load
    assert records
    assert key not in p.stdout and key not in p.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert key not in f.read_text(errors="replace"), f"the API key was written into {f}"
