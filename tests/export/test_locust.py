"""chaos/export/locust.py: the load as a Locust master and workers in a cluster, with the config `chaos load`
writes, the replay log beside it, and the API key only by the name of its Secret."""

import json
import re
import types
from pathlib import Path

import pytest
import yaml

from chaos.errors import InputError
from chaos.export import locust
from chaos.export.bundle import build

from .conftest import LOAD, config

LOCUSTFILE = Path(locust.__file__).parents[1] / "load" / "locustfile.py"


def by_kind(docs):
    return {d["kind"] + ("/" + d["metadata"]["name"].rsplit("-", 1)[-1] if d["kind"] == "Job" else ""): d
            for d in docs}


def test_the_config_has_every_key_the_locust_file_reads(make_exp):
    config_doc, _ = locust.load_config(make_exp([]), config(), keep_alive=True)
    read = set(re.findall(r"CFG(?:\[|\.get\()\"(\w+)\"", LOCUSTFILE.read_text()))
    assert read and read <= set(config_doc)
    assert config_doc["hosts"] == ["http://llm.ns.svc:8000/v1"] and config_doc["model"] == "chaos-reference"
    assert config_doc["workers"] == 2 and config_doc["records_path"] == "/var/lib/llm-chaos/requests.jsonl"
    assert config_doc["timeouts"] == {"connect": 2.0, "first_token": 10.0, "total": 30.0}


def test_a_master_and_workers_that_find_each_other(make_exp):
    docs = by_kind(locust.resources(make_exp([]), config(workers=3)))
    master, workers, service = docs["Job/master"], docs["Job/workers"], docs["Service"]
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 3
    assert "--expect-workers 3" in master["spec"]["template"]["spec"]["containers"][0]["command"][2]
    worker_cmd = workers["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert f"--master-host {service['metadata']['name']} --master-port 5557" in worker_cmd
    assert service["spec"]["selector"] == master["spec"]["template"]["metadata"]["labels"]
    assert workers["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "locust-worker"


def test_a_replay_log_travels_in_the_configmap(make_exp, tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}) + "\n")
    exp = make_exp([], load={"replay": str(log), "users": 1, "duration": "10s",
                             "timeouts": LOAD["timeouts"]})
    data = by_kind(locust.resources(exp, config()))["ConfigMap"]["data"]
    assert data["log.jsonl"] == log.read_text()
    spec = json.loads(data["load-config.json"])["workload"]["specs"][0][0]
    assert spec["replay_file"] == "/etc/llm-chaos/log.jsonl"


def test_the_api_key_is_read_from_a_secret_by_name_and_its_value_is_in_no_file(make_exp, monkeypatch):
    monkeypatch.setenv("EXPORT_TEST_KEY", "sk-export-test-0123456789abcdef")
    target = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "EXPORT_TEST_KEY"}
    exp = make_exp([{"type": "stream_cut", "at": "5s"}], target=target)
    b = build(exp, config(api_key_secret="llm-key"), "out")
    workers = yaml.safe_load(next(t for name, t in b.files.items() if "workers" in name))
    env = workers["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "EXPORT_TEST_KEY", "valueFrom": {"secretKeyRef": {"name": "llm-key", "key": "EXPORT_TEST_KEY"}}} in env
    assert not any("sk-export-test" in text for text in b.files.values())
    assert "api_key_env: EXPORT_TEST_KEY" in b.files["beside-target.yaml"]


def test_httpchaos_makes_the_load_open_a_connection_per_request(make_exp):
    b = build(make_exp([{"type": "drop_connection", "at": "5s"}]), config(), "out")
    cm = next(t for name, t in b.files.items() if "configmap" in name)
    assert '"keep_alive": false' in cm
    plain = build(make_exp([{"type": "kill_instance", "at": "5s"}]), config(), "out")
    assert '"keep_alive": true' in next(t for name, t in plain.files.items() if "configmap" in name)


def test_timeouts_that_need_a_running_target_are_refused(make_exp):
    load = {**LOAD, "timeouts": {"connect": "2s", "first_token": "auto", "total": "30s"}}
    with pytest.raises(InputError, match="auto"):
        locust.resources(make_exp([], load=load), config())


def test_a_game_day_runs_the_load_as_cronjobs(make_exp):
    docs = locust.resources(make_exp([]), config(schedule="0 3 * * 1"))
    crons = [d for d in docs if d["kind"] == "CronJob"]
    assert len(crons) == 2 and all(c["spec"]["schedule"] == "0 3 * * 1" for c in crons)
    assert not any(d["kind"] == "Job" for d in docs)


def test_a_target_that_names_no_model_needs_model():
    exp = types.SimpleNamespace(path="e.yaml", target=types.SimpleNamespace(settings={}, kind="process",
                                                                          name="p"))
    with pytest.raises(InputError, match="--model"):
        locust.model_of(exp, config())
    assert locust.model_of(exp, config(model="qwen")) == "qwen"
