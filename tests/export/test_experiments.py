"""Every experiment of experiments/ exported, and every object read back from the files written and validated;
the beside experiment loads as chaos run loads it; secrets stay out; an export replaces only its own files."""

import glob
import os

import pytest
import yaml

from chaos.experiment.model import load_experiment
from chaos.export import kubeschemas, schemas
from chaos.export.bundle import MANIFEST, build, write
from chaos.errors import InputError

from .conftest import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.yaml")))
# instances that are not replicas, and so need --instance (all-primaries-down freezes the backup b0)
INSTANCES = ["b0=app.kubernetes.io/name=llm-backup", "gw=app.kubernetes.io/name=gateway"]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=os.path.basename)
def test_every_experiment_exports_and_every_object_written_is_valid(path, tmp_path):
    exp = load_experiment(path)
    out = str(tmp_path / "out")
    files = write(build(exp, config(instances=INSTANCES), out))
    kinds = []
    for name in files:
        if not name.endswith(".yaml") or name.startswith("beside"):
            continue
        for doc in yaml.safe_load_all(open(os.path.join(out, name), encoding="utf-8")):
            check = schemas.problems if doc["apiVersion"].startswith("chaos-mesh.org") else kubeschemas.problems
            assert check(doc) == [], name
            kinds.append(doc["kind"])
    assert sorted(k for k in kinds if k not in ("Workflow",)) == ["ConfigMap", "Job", "Job", "Service"]
    assert kinds.count("Workflow") == (1 if any(f.type in ("kill_instance", "pause_instance", "latency", "timeout",
                                                           "packet_loss", "partition", "link_rate", "netem")
                                                for f in exp.faults) else 0)
    assert "README.md" in files and "no kubernetes cluster ran" in open(os.path.join(out, "README.md")).read().lower()
    if "beside.yaml" in files:
        beside = load_experiment(os.path.join(out, "beside.yaml"))
        assert beside.target.kind == "openai" and all(f.params.link == "client" for f in beside.faults
                                                      if hasattr(f.params, "link"))
    assert ("NOT-EXPORTED.md" in files) == bool([f for f in exp.faults if f.type in
                                                 ("server_hook", "abnormal_inputs", "stream_stall", "garble_text",
                                                  "replace_text", "http_error", "tcp_reset")])


def test_the_not_exported_list_says_why_and_how_to_run_beside(tmp_path):
    out = str(tmp_path / "out")
    write(build(load_experiment(os.path.join(ROOT, "experiments", "stream-stall.yaml")), config(), out))
    text = open(os.path.join(out, "NOT-EXPORTED.md")).read()
    assert "stall-r1" in text and "streamed answer" in text
    assert "kubectl port-forward -n ns svc/llm 8000:8000" in text and f"chaos run {out}/beside.yaml" in text
    write(build(load_experiment(os.path.join(ROOT, "experiments", "wedged-replica.yaml")), config(), out))
    text = open(os.path.join(out, "NOT-EXPORTED.md")).read()
    assert "arm-wedge-r1 | server_hook" in text and "against the bundled reference target" in text
    assert "special-characters | abnormal_inputs" in text


def test_a_secret_variable_s_value_is_in_no_file(tmp_path):
    exp_file = tmp_path / "e.yaml"
    exp_file.write_text(yaml.safe_dump({
        "name": "secretive", "target": {"kind": "reference", "replicas": 2},
        "load": {"users": 1, "duration": "20s", "timeouts": {"connect": "2s", "first_token": "5s", "total": "9s"}},
        "faults": [{"type": "http_error", "at": "5s", "status": 500, "message": "${ERR_TOKEN}"},
                   {"type": "replace_text", "at": "5s", "text": "${ERR_TOKEN}"}]}))
    exp = load_experiment(str(exp_file), {"ERR_TOKEN": "tok-0123456789-very-secret"})
    b = build(exp, config(), str(tmp_path / "out"))
    import base64

    assert not any("tok-0123456789" in t or base64.b64encode(b"tok-0123456789").decode()[:12] in t
                   for t in b.files.values())


def test_an_export_replaces_its_own_files_and_refuses_a_folder_of_something_else(make_exp, tmp_path):
    out = tmp_path / "out"
    write(build(make_exp([{"type": "kill_instance", "at": "5s"}]), config(), str(out)))
    assert list((out / "chaos").iterdir())
    write(build(make_exp([{"type": "server_hook", "at": "5s", "step_delay_ms": 5}]), config(), str(out)))
    assert not (out / "chaos").exists()  # the old workflow would have been applied with the new load
    assert (out / MANIFEST).exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        write(build(make_exp([]), config(), str(other)))


def test_an_object_that_fails_its_schema_stops_the_export_before_anything_is_written(make_exp, tmp_path,
                                                                                   monkeypatch):
    from chaos.export import bundle

    monkeypatch.setattr(bundle.schemas, "problems", lambda doc: ["spec.action: 'pod-freeze' is not one of ..."])
    with pytest.raises(AssertionError, match="invalid Workflow .* bug of llm-chaos"):
        build(make_exp([{"type": "kill_instance", "at": "5s"}]), config(), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
