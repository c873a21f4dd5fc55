"""Target settings that keep a run on loopback (allow_remote) and let the load fix output lengths (ignore_eos)."""

import json
import re
import subprocess
import sys

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment, load_target

pytestmark = pytest.mark.beside  # its slow tests judge state, not time: beside the whole runs under xdist

EXP = """\
name: t
target: TARGET
load: {workload: chat, users: 2, duration: 10s}
"""


def exp_with(tmp_path, target: str):
    p = tmp_path / "e.yaml"
    p.write_text(EXP.replace("TARGET", target))
    return str(p)


def refused(path) -> str:
    with pytest.raises(ExperimentError) as e:
        load_experiment(path)
    (msg,) = e.value.problems
    return msg


def test_ignore_eos_defaults_on_and_can_be_turned_off(tmp_path):
    exp = load_experiment(exp_with(tmp_path, "{kind: reference, preset: tiny}"))
    assert exp.target.ignore_eos is True and exp.target.allow_remote is False
    exp = load_experiment(exp_with(tmp_path, "{kind: openai, base_url: 'http://127.0.0.1:8000/v1', model: m, "
                                             "ignore_eos: false}"))
    assert exp.target.ignore_eos is False
    msg = refused(exp_with(tmp_path, "{kind: reference, ignore_eos: sometimes}"))
    assert ":2:" in msg and "target.ignore_eos: expected boolean" in msg


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--host=0.0.0.0"], ["--hos", "10.1.2.3"],
                                  ["--port", "0", "--host", "example.com"], ["--host", "::"], ["--host"]])
def test_a_reference_target_binding_beyond_loopback_is_refused(tmp_path, args):
    target = "{kind: reference, preset: tiny, args: %s}" % args
    msg = refused(exp_with(tmp_path, target))
    assert msg.startswith(f"{tmp_path / 'e.yaml'}:2:") and "target.args[" in msg
    assert "allow_remote: true" in msg or "needs an address" in msg
    if len(args) > 1:
        load_experiment(exp_with(tmp_path, target.replace("}", ", allow_remote: true}")))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "localhost", "::1", "[::1]"])
def test_loopback_hosts_are_accepted(tmp_path, host):
    load_experiment(exp_with(tmp_path, "{kind: reference, preset: tiny, args: [--host, '%s']}" % host))
    load_experiment(exp_with(tmp_path, "{kind: openai, base_url: 'http://%s:8000/v1', model: m}"
                             % (f"[{host.strip('[]')}]" if ":" in host else host)))


def test_a_remote_openai_target_needs_allow_remote(tmp_path):
    target = "{kind: openai, base_url: 'https://api.example.com/v1', model: m, api_key_env: EXAMPLE_KEY}"
    msg = refused(exp_with(tmp_path, target))
    assert ":2:" in msg and "api.example.com is not a loopback address" in msg and "allow_remote: true" in msg
    exp = load_experiment(exp_with(tmp_path, target.replace("}", ", allow_remote: true}")))
    assert exp.target.allow_remote is True
    # credentials in the URL are refused whatever allow_remote says
    msg = refused(exp_with(tmp_path, target.replace("https://", "https://user:hunter2@").replace(
        "}", ", allow_remote: true}")))
    assert "must not carry credentials" in msg and "hunter2" not in msg


def test_a_target_file_is_checked_the_same_way_by_chaos_validate(tmp_path):
    t = tmp_path / "t.yaml"
    t.write_text("kind: reference\npreset: tiny\nargs: [--host, 0.0.0.0]\n")
    with pytest.raises(ExperimentError):
        load_target(str(t))
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", str(t)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{t}:3:" in r.stderr and "allow_remote: true" in r.stderr
    t.write_text("kind: reference\npreset: tiny\nargs: [--host, 0.0.0.0]\nallow_remote: true\n")
    spec, _ = load_target(str(t))
    assert spec.allow_remote is True


def test_max_model_len_beyond_the_preset_is_refused(tmp_path):
    msg = refused(exp_with(tmp_path, "{kind: reference, preset: tiny, max_model_len: 4096}"))
    assert "exceeds the tiny preset's context of 1024 tokens" in msg


@pytest.mark.parametrize("target,needle", [
    ("{kind: [reference]}", "target.kind"),  # not a name: the kind's own error, no TypeError
    ("{kind: openai, base_url: 'http://[::1/v1', model: m}", "base_url is not a valid URL"),
    ("{kind: openai, base_url: 'http://127.0.0.1:99999/v1', model: m}", "base_url is not a valid URL"),
])
def test_malformed_targets_are_one_line_each(tmp_path, target, needle):
    msg = refused(exp_with(tmp_path, target))
    assert msg.startswith(f"{tmp_path / 'e.yaml'}:2:") and needle in msg


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1?key=hunter2", "http://127.0.0.1:8000/v1#hunter2",
                                 "http://127.0.0.1:8000/v1?", "http://127.0.0.1:8000/v1/?api-version=2&k=hunter2"])
def test_a_query_or_fragment_in_base_url_is_refused(tmp_path, url):
    """Instance.url (journal, report, health checks) would keep it, and the load would not send it."""
    msg = refused(exp_with(tmp_path, "{kind: openai, base_url: '%s', model: m}" % url))
    assert msg.startswith(f"{tmp_path / 'e.yaml'}:2:") and "target.base_url: base_url must not carry a query" in msg
    assert "hunter2" not in msg
    t = tmp_path / "t.yaml"
    t.write_text(f"kind: openai\nmodel: m\nbase_url: '{url}'\n")
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", str(t)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"{t}:3:" in r.stderr and "must not carry a query" in r.stderr


@pytest.mark.parametrize("url,kept", [
    ("http://u:pw@127.0.0.1:8000/v1/?key=hunter2#frag", "http://127.0.0.1:8000/v1"),
    ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ("https://api.example.com/api/v3/", "https://api.example.com/api/v3"),
])
def test_the_openai_target_keeps_only_scheme_host_port_and_path(tmp_path, url, kept):
    """Whatever reaches it (the model refuses the rest first): nothing else of base_url gets into a journal."""
    from chaos.experiment.model import TargetSpec
    from chaos.targets import make_target

    target = make_target(TargetSpec("openai", "t", {"base_url": url, "model": "m"}, "x"), str(tmp_path))
    assert target.instances[0].url == kept and "hunter2" not in str(target.describe())


TARGETS = {"process": '{kind: process, command: ["%s", "-m", "chaos", "reference", "serve", "--preset", "tiny", '
                      '"--port", "{port}"], model: chaos-reference}' % sys.executable,
           "openai": '{kind: openai, base_url: "http://127.0.0.1:9/v1", model: chaos-reference}'}
FLOOR = """\
name: floor
target: TARGET
load: {workload: chat, users: 2, duration: 3s, input_tokens: INPUT, output_tokens: 4,
       timeouts: {connect: 2s, first_token: 20s, total: 30s}}
"""


@pytest.mark.slow
def test_input_tokens_below_the_exact_floor_are_refused_for_any_target_that_may_be_llm_chaos(tmp_path):
    """The run counts exactly for any server that says it is llm-chaos's, a process target running `chaos
    reference serve` among them: validate asks for that floor, and the run accepts what validate accepted."""
    p = tmp_path / "e.yaml"
    for target in TARGETS.values():
        p.write_text(FLOOR.replace("TARGET", target).replace("INPUT", "10"))
        msg = refused(str(p))
        assert "load: the run would refuse this load: input_tokens 10 is below" in msg and "exactly" in msg, msg
    floor = int(re.search(r"ask for at least (\d+)", msg).group(1))
    p.write_text(FLOOR.replace("TARGET", TARGETS["process"]).replace("INPUT", str(floor)))
    assert load_experiment(str(p)).load.input_tokens == floor
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "chaos", "run", str(p), "--out", str(run_dir), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]  # a verdict, not a refused load
    assert json.load(open(run_dir / "report.json"))["requests"] > 0


def test_what_readers_outside_the_targets_need_is_a_field_of_the_spec_taken_from_its_settings():
    from chaos.experiment.model import TargetSpec

    spec = TargetSpec("openai", "t", {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "K",
                                      "links": ["client"], "toxiproxy": {"url": "http://127.0.0.1:8474"}}, "x")
    assert (spec.base_url, spec.api_key_env, spec.gateway) == ("http://127.0.0.1:9/v1", "K", None)
    assert spec.links == ["client"] and spec.toxiproxy == {"url": "http://127.0.0.1:8474"}
    bare = TargetSpec("reference", "r", {"gateway": {"retries": 1}}, "x", replicas=2)
    assert bare.gateway == {"retries": 1} and bare.links == [] and bare.toxiproxy == {}
    for bad in (dict(kind="vllm"), dict(kind="reference", replicas=0), dict(kind="docker", startup_timeout=0.0)):
        with pytest.raises(ValueError):
            TargetSpec(name="t", settings={}, source="x", **bad)
