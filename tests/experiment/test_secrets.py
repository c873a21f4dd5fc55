"""Secrets never reach an output: variables interpolate only when declared, secret-named ones are masked, the
API key behind api_key_env is read at request time and written nowhere, and a key pasted where its variable's
name belongs is refused showing at most 4 characters.

The runs are real: `chaos run` against the bundled reference target (tiny preset) and against an openai target
aimed at a real reference server on loopback; afterwards every file under the run directory and everything the
command printed is searched for the secret values.
"""

import json
import os
import secrets
import subprocess
import sys

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment
from chaos.experiment.variables import MASK, Masker

from ..secretscan import ArgvWatch, files_leaking

pytestmark = pytest.mark.beside  # its slow tests judge state, not time: beside the whole runs under xdist


def chaos(*args, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def token(prefix="tok"):
    return f"{prefix}-{secrets.token_hex(12)}"


SECRET_EXP = """\
name: secrets
description: "deploy with ${MY_API_TOKEN} and ${DB_PASSWORD:-unset} (users ${USERS})"
vars: {MY_API_TOKEN: "", DB_PASSWORD: "", USERS: 2}
target: {kind: reference, name: "ref-${MY_API_TOKEN}", replicas: 1, preset: tiny, startup_timeout: 60s}
load: {workload: chat, users: "${USERS}", duration: 4s, output_tokens: 4-8,
       timeouts: {connect: 2s, first_token: 10s, total: 20s}}
faults:
  - {type: server_hook, name: "slow-${MY_API_TOKEN}", at: 1.5s, step_delay_ms: 5, duration: 1s}
verify:
  status_codes: {allowed: [200]}
"""


def test_undeclared_variables_are_refused_without_their_value(tmp_path):
    value = token()
    p = tmp_path / "e.yaml"
    p.write_text(SECRET_EXP.replace("(users ${USERS})", "${UNDECLARED_KEY}"))
    for args in (["validate", str(p)], ["run", str(p), "--dry-run"]):
        r = chaos(*args, env={"UNDECLARED_KEY": value, "MY_API_TOKEN": token()})
        assert r.returncode == 2
        assert f"{p}:2:" in r.stderr and "${UNDECLARED_KEY} is not declared: declare it under vars:" in r.stderr
        assert value not in r.stdout + r.stderr and "Traceback" not in r.stderr
    # Plain environment variables never leak in: HOME is set, but this file does not declare it.
    h = tmp_path / "h.yaml"
    h.write_text(SECRET_EXP.replace("(users ${USERS})", "${HOME}"))
    with pytest.raises(ExperimentError) as e:
        load_experiment(str(h))
    assert "${HOME} is not declared" in e.value.problems[0] and os.environ["HOME"] not in e.value.problems[0]


def test_declared_secret_is_used_but_masked_in_every_public_form(tmp_path, monkeypatch):
    value, password = token(), token("pw")
    monkeypatch.setenv("MY_API_TOKEN", value)
    monkeypatch.setenv("DB_PASSWORD", password)
    p = tmp_path / "e.yaml"
    p.write_text(SECRET_EXP)
    exp = load_experiment(str(p))
    assert exp.target.settings["name"] == f"ref-{value}"  # substituted where the run uses it
    assert exp.description == f"deploy with {MASK} and {MASK} (users 2)"  # labels are public
    assert exp.target.name == f"ref-{MASK}" and exp.faults[0].name == f"slow-{MASK}"
    assert value not in json.dumps(exp.resolved) and password not in json.dumps(exp.resolved)
    assert exp.resolved["load"]["users"] == 2  # only secrets are masked; typing kept
    # the masking function the runner applies to anything it writes or prints
    record = {"event": "x", "detail": f"saw {value} and {password}", value: [f"k={password}"]}
    assert value not in json.dumps(exp.mask(record)) and password not in json.dumps(exp.mask(record))
    assert exp.mask(f"a {value} b") == f"a {MASK} b" and exp.mask(3) == 3
    # --var beats the environment, and is masked just the same
    other = token()
    exp = load_experiment(str(p), {"MY_API_TOKEN": other})
    assert exp.target.settings["name"] == f"ref-{other}" and other not in json.dumps(exp.resolved)
    # a secret cannot name the run: the name is in the run directory's path
    q = tmp_path / "n.yaml"
    q.write_text(SECRET_EXP.replace("name: secrets", "name: x${MY_API_TOKEN}"))
    with pytest.raises(ExperimentError) as e:
        load_experiment(str(q))
    assert "secret variable cannot be part of the name" in e.value.problems[0]
    assert value not in e.value.problems[0]


def test_masker_reads_the_api_key_when_called(monkeypatch):
    m = Masker(["abcdef"], key_env="SOME_LLM_KEY")
    assert m("x abcdef y") == f"x {MASK} y"
    monkeypatch.setenv("SOME_LLM_KEY", "sk-live-12345")
    assert m({"h": "Bearer sk-live-12345"}) == {"h": f"Bearer {MASK}"}


def test_dry_run_and_validate_print_no_secret(tmp_path):
    value, password = token(), token("pw")
    p = tmp_path / "e.yaml"
    p.write_text(SECRET_EXP)
    env = {"MY_API_TOKEN": value, "DB_PASSWORD": password}
    for args in (["validate", str(p)], ["run", str(p), "--dry-run"], ["run", str(p), "--dry-run", "--var",
                                                                      f"MY_API_TOKEN={value}"]):
        r = chaos(*args, env=env)
        assert r.returncode == 0, r.stderr
        assert value not in r.stdout + r.stderr and password not in r.stdout + r.stderr


@pytest.mark.slow
def test_a_real_run_writes_no_secret_anywhere(tmp_path):
    value, password = token(), token("pw")
    p = tmp_path / "e.yaml"
    p.write_text(SECRET_EXP)
    run_dir = tmp_path / "run"
    with ArgvWatch(value, password) as argv:
        r = chaos("run", str(p), "--out", str(run_dir), "--json",
                  env={"MY_API_TOKEN": value, "DB_PASSWORD": password})
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]  # a verdict either way; both are fine
    rep = json.load(open(run_dir / "report.json"))
    assert rep["requests"] > 0 and rep["faults"][0]["applied"]
    assert rep["experiment"]["description"] == f"deploy with {MASK} and {MASK} (users 2)"
    for f in ("experiment.resolved.json", "report.json", "report.md", "journal.jsonl"):
        assert (run_dir / f).exists(), f
    assert files_leaking(run_dir, value, password) == []  # in any common encoding
    assert argv.looked > 10 and argv.leaks == []  # no process's arguments held them
    assert value not in r.stdout + r.stderr and password not in r.stdout + r.stderr


OPENAI_EXP = """\
name: remote-key
target: {kind: openai, base_url: "BASE/v1", model: chaos-reference, api_key_env: LLM_TEST_API_KEY}
load: {workload: chat, users: 2, duration: 4s, output_tokens: 4-8, timeouts: {connect: 2s, first_token: 10s, total: 20s}}
verify:
  status_codes: {allowed: [200]}
"""


def test_the_api_key_is_never_copied_into_the_experiment(tmp_path, monkeypatch):
    """The key is read when a request is made (chaos/targets/openai.py, chaos/load/locustfile.py); a real run
    against an openai target that greps every output for the key is tests/run/test_runs.py::
    test_openai_target_keeps_the_key_out_of_everything."""
    key = token("sk-test")
    monkeypatch.setenv("LLM_TEST_API_KEY", key)
    p = tmp_path / "e.yaml"
    p.write_text(OPENAI_EXP.replace("BASE", "http://127.0.0.1:9"))
    exp = load_experiment(str(p))
    assert exp.target.settings["api_key_env"] == "LLM_TEST_API_KEY"
    assert key not in json.dumps(exp.resolved) + json.dumps(exp.target.settings) + json.dumps(exp.load.to_dict())
    assert exp.mask(f"Authorization: Bearer {key}") == f"Authorization: Bearer {MASK}"  # read when called
    from chaos.targets import make_target

    target = make_target(exp.target, str(tmp_path))
    assert key not in json.dumps(target.describe()) and target.instances[0].id == "127.0.0.1:9"
    for args in (["validate", str(p)], ["run", str(p), "--dry-run"]):
        r = chaos(*args, env={"LLM_TEST_API_KEY": key})
        assert r.returncode == 0 and key not in r.stdout + r.stderr, (args, r.stderr)


@pytest.mark.parametrize("pasted", ["sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
                                    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
                                    "${OPENAI_API_KEY}"])
def test_a_pasted_key_in_api_key_env_is_refused_showing_at_most_4_characters(tmp_path, pasted):
    p = tmp_path / "e.yaml"
    p.write_text(OPENAI_EXP.replace("BASE", "http://127.0.0.1:9").replace("LLM_TEST_API_KEY", f"'{pasted}'"))
    r = chaos("validate", str(p), env={"OPENAI_API_KEY": "sk-from-env-0123456789"})
    assert r.returncode == 2 and f"{p}:2:" in r.stderr and "Traceback" not in r.stderr
    assert "NAME" in r.stderr, r.stderr
    assert "sk-from-env-0123456789"[4:] not in r.stderr
    if "${" in pasted:
        assert "write api_key_env: OPENAI_API_KEY, not ${OPENAI_API_KEY}" in r.stderr
    else:
        assert pasted[4:] not in r.stderr and pasted[:4] in r.stderr


def test_reports_are_written_through_the_mask(tmp_path):
    from chaos.report.writer import write_reports

    value = token()
    report = {"experiment": {"name": "x", "description": f"d {value}"}, "verdict": "passed", "exit_code": 0,
              "started": 0.0, "duration_s": 1.0, "target": {"kind": "reference", "name": "t", "instances": []},
              "reason": f"because {value}", "checks": [{"name": "c", "passed": True, "measured": value,
                                                        "threshold": "", "detail": ""}],
              "faults": [], "timeline": [{"t": 0.0, "event": "note", "detail": value}], "notes": [value]}
    write_reports(str(tmp_path), report, [], mask=Masker([value]))
    assert files_leaking(tmp_path, value) == []
    assert json.load(open(tmp_path / "report.json"))["reason"] == f"because {MASK}"


LEAK_BASE = """\
name: leak
vars: {MY_TOKEN: ""}
target: {kind: reference, replicas: 1, preset: tiny}
load: {workload: chat, users: 2, duration: 4s}
"""
LONG = "sk-live-" + "Ab3" * 100  # longer than any clipped quote (80 and 160 characters)


SLOW = pytest.mark.slow  # each case starts the CLI three or four times: the fast tier keeps the first


@pytest.mark.parametrize("case,value", [
    ("users", token("sk-live")), pytest.param("users", LONG, marks=SLOW), pytest.param("duration", LONG, marks=SLOW),
    pytest.param("replay", token("sk-live"), marks=SLOW), pytest.param("target file", token("sk-live"), marks=SLOW),
    pytest.param("literal env", token("sk-live"), marks=SLOW),
    pytest.param("literal env list", token("sk-live"), marks=SLOW),
], ids=["users-token", "users-long", "duration-long", "replay", "target-file", "literal-env", "literal-env-list"])
def test_an_invalid_secret_value_is_masked_in_every_error(tmp_path, case, value):
    """Substitution runs before validation, so the value an error quotes can be a secret's: validate, dry-run
    and run print it as ***, whole or clipped."""
    text, env = LEAK_BASE, {"MY_TOKEN": value, "SVC_TOKEN": value}
    if case in ("users", "duration"):
        text = text.replace(f"{case}: {'2' if case == 'users' else '4s'}", f'{case}: "${{MY_TOKEN}}"')
    elif case == "replay":  # a semantic check's problem, past the schema
        text = text.replace("workload: chat,", 'workload: replay, replay: "${MY_TOKEN}",')
    elif case == "target file":  # the target file's own vars:
        (tmp_path / "t.yaml").write_text('kind: reference\nvars: {SVC_TOKEN: ""}\nreplicas: "${SVC_TOKEN}"\n')
        text = text.replace("{kind: reference, replicas: 1, preset: tiny}", "t.yaml")
    else:  # a plain value under a secret-named env: entry, of a type the schema refuses
        if not case.endswith("list"):
            value = str(10**12 + secrets.randbelow(10**12))  # a number: "expected string, got int ..."
        bad = f"[{value}]" if case.endswith("list") else value
        text = text.replace("{kind: reference, replicas: 1, preset: tiny}",
                            f"{{kind: process, command: 'serve {{port}}', env: {{SERVICE_TOKEN: {bad}}}}}")
    p = tmp_path / "e.yaml"
    p.write_text(text)
    runs = [["validate", str(p)], ["run", str(p), "--dry-run"], ["run", str(p), "--out", str(tmp_path / "run")]]
    if case == "target file":
        runs.append(["validate", str(tmp_path / "t.yaml")])
    for args in runs:
        r = chaos(*args, env=env, timeout=60)
        out = r.stdout + r.stderr
        assert r.returncode == 2 and "error: " in r.stderr and "Traceback" not in out, (args, out[-1500:])
        assert MASK in r.stderr, (args, r.stderr)  # the problem is reported, its value masked
        assert value not in out and value[8:24] not in out, (args, r.stderr)
    assert not (tmp_path / "run").exists()


def test_an_in_place_default_never_reads_the_environment(tmp_path, monkeypatch):
    """${NAME:-default} is its default or a --var: an exported DATABASE_URL stays out of the description."""
    monkeypatch.setenv("DATABASE_URL", "postgres://u:hunter2@db/x")
    p = tmp_path / "e.yaml"
    p.write_text(SECRET_EXP.replace("(users ${USERS})", "db ${DATABASE_URL:-none}"))
    exp = load_experiment(str(p))
    assert exp.description.endswith("db none") and "hunter2" not in json.dumps(exp.resolved)
    assert load_experiment(str(p), {"DATABASE_URL": "sqlite"}).description.endswith("db sqlite")
    r = chaos("run", str(p), "--dry-run", env={"DATABASE_URL": "postgres://u:hunter2@db/x"})
    assert r.returncode == 0 and "db none" in r.stdout and "hunter2" not in r.stdout + r.stderr
    # declared under vars:, the environment fills it (and a secret-named one is masked)
    q = tmp_path / "q.yaml"
    q.write_text(SECRET_EXP.replace("(users ${USERS})", "${DB_PASSWORD:-none}"))
    monkeypatch.setenv("DB_PASSWORD", "pw-from-env")
    exp = load_experiment(str(q))
    assert exp.description == f"deploy with {MASK} and {MASK} {MASK}" and exp.mask("pw-from-env") == MASK


@pytest.mark.parametrize("where", ["inline", "target file"])
def test_a_literal_secret_in_env_is_masked(tmp_path, where):
    value, plain = token("sk-literal"), "visible-value"
    target = f"{{kind: process, command: 'serve {{port}}', env: {{OPENAI_API_KEY: {value}, LOG_LEVEL: {plain}}}}}"
    if where == "target file":
        (tmp_path / "t.yaml").write_text(target + "\n")
        target = "t.yaml"
    p = tmp_path / "e.yaml"
    p.write_text(f"name: env\ntarget: {target}\nload: {{workload: chat, users: 2, duration: 4s}}\n")
    exp = load_experiment(str(p))
    assert exp.target.settings["env"] == {"OPENAI_API_KEY": value, "LOG_LEVEL": plain}  # what the process gets
    assert exp.resolved["target"]["env"] == {"OPENAI_API_KEY": MASK, "LOG_LEVEL": plain}
    assert exp.mask(f"key={value}") == f"key={MASK}" and exp.mask(plain) == plain
    r = chaos("run", str(p), "--dry-run")
    assert r.returncode == 0 and value not in r.stdout + r.stderr
