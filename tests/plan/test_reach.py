"""chaos.plan.reach.reached with real processes: a target file's tiny reference replica is started, answers a
real request over loopback, and is gone after the with-block however it ends; a URL is health-checked as it is."""

import json
import sys
import urllib.request

import pytest

from chaos.common import same_process
from chaos.targets import TargetError
from chaos.targets.base import free_port
from chaos.plan.reach import reached

ONE_REPLICA = """\
kind: reference
name: one-tiny
replicas: 1
preset: ${PRESET:-small}
startup_timeout: 60s
"""


@pytest.fixture
def target_file(tmp_path):
    p = tmp_path / "one.yaml"
    p.write_text(ONE_REPLICA)
    return str(p)


def chat(base_url: str, model: str) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    req = urllib.request.Request(base_url + "/v1/chat/completions", body.encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def processes(r) -> list[tuple[int, float]]:
    return [(i.pid, i.create_time) for i in r.target.all_instances()]


@pytest.mark.slow
def test_a_target_file_is_started_answers_and_is_stopped(target_file, tmp_path):
    lines = []
    with reached(target_file, {"PRESET": "tiny"}, str(tmp_path / "out"), lines.append) as r:
        procs = processes(r)
        assert len(procs) == 1 and all(same_process(*p) for p in procs)
        assert r.spec.settings["preset"] == "tiny" and r.name == "one-tiny" and r.limits is None
        assert r.model == "chaos-reference" and r.urls == [r.base_url] and r.headers == {}
        answer = chat(r.base_url, r.model)
        assert answer["choices"][0]["message"]["content"] is not None and answer["model"] == r.model
        with reached(r.base_url) as by_url:  # a URL that answers: reached as it is, its model listed
            assert by_url.base_url == r.base_url and by_url.model == r.model and by_url.spec is None
    assert not any(same_process(*p) for p in procs), "the replica outlived the with-block"
    assert lines[0].startswith("starting the target one-tiny") and lines[-1].startswith("stopping")
    assert (tmp_path / "out" / "replica-r0.log").exists()


@pytest.mark.slow
def test_the_target_is_stopped_when_the_block_is_interrupted(target_file, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with reached(target_file, {"PRESET": "tiny"}, str(tmp_path)) as r:
            procs = processes(r)
            raise KeyboardInterrupt
    assert procs and not any(same_process(*p) for p in procs)


def test_a_url_where_nothing_answers_says_what_to_do():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TargetError, match="nothing answers at .*start the server first"):
        with reached(url):
            pytest.fail("reached a URL where nothing listens")


def test_a_target_that_does_not_come_up_is_stopped_and_named(tmp_path, monkeypatch):
    p = tmp_path / "bad.yaml"  # a process that lives but never serves: up() gives up, and it must not outlive that
    p.write_text(f"kind: process\nname: never\ncommand: [{sys.executable!r}, -c, 'import time; time.sleep(60)', "
                 f"'{{port}}']\nhealth_path: /health\nstartup_timeout: 1s\n")
    from chaos.targets.process import ProcessTarget

    spawned, start = [], ProcessTarget.start_instance

    def record(self, inst):  # only learns the pid of the real process the target spawned
        start(self, inst)
        spawned.append((inst.pid, inst.create_time))

    monkeypatch.setattr(ProcessTarget, "start_instance", record)
    with pytest.raises(TargetError, match=r"the target never .* did not come up: p0 did not become healthy .*"
                                          r"raise startup_timeout"):
        with reached(str(p), out_dir=str(tmp_path / "out")):
            pytest.fail("a target that never served was reached")
    assert len(spawned) == 1 and not same_process(*spawned[0]), "the target that failed to come up still runs"


def test_an_invalid_file_and_a_missing_key_are_refused_before_anything_starts(tmp_path, monkeypatch):
    p = tmp_path / "t.yaml"
    p.write_text("kind: reference\nreplicas: 0\n")
    with pytest.raises(TargetError, match=r"not a valid target file:\n .*t.yaml:2:\d+: .*replicas"):
        with reached(str(p)):
            pass
    q = tmp_path / "k.yaml"
    q.write_text("kind: openai\nbase_url: http://127.0.0.1:9/v1\nmodel: m\napi_key_env: CHAOS_TEST_REACH_KEY\n")
    monkeypatch.delenv("CHAOS_TEST_REACH_KEY", raising=False)
    with pytest.raises(TargetError, match="CHAOS_TEST_REACH_KEY is not set; export it"):
        with reached(str(q)):
            pass
    with pytest.raises(TargetError, match="neither a URL .* nor a target file"):
        with reached(str(tmp_path / "missing.yaml")):
            pass


def test_the_key_is_in_headers_and_in_no_repr(monkeypatch):
    from chaos.plan.reach import Reached, key_headers

    monkeypatch.setenv("CHAOS_TEST_REACH_KEY", "sk-test-never-shown")
    r = Reached(base_url="http://127.0.0.1:1", model="m", headers=key_headers("CHAOS_TEST_REACH_KEY"), name="n")
    assert r.headers == {"Authorization": "Bearer sk-test-never-shown"}
    assert "sk-test-never-shown" not in repr(r)
