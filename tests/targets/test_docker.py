"""Docker targets and instance faults against a real dockerd (scripts/docker-engine.sh starts one)."""

import json
import os
import subprocess
import sys

import pytest

from tests.run.conftest import report, unreverted

IMAGE = "chaos-busybox:latest"


def engine_or_skip():
    try:
        import docker

        c = docker.from_env()
        c.ping()
    except Exception as e:  # noqa: BLE001 - any failure means: no engine here
        pytest.skip(f"no Docker engine reachable ({type(e).__name__}); source scripts/docker-engine.sh as root")
    try:
        c.images.get(IMAGE)
    except Exception:
        pytest.skip(f"image {IMAGE} missing; scripts/docker-engine.sh builds it with docker import")
    return c


def mounts() -> dict:
    """The host's Python, the venv and this checkout, read-only: the busybox image has no Python of its own."""
    paths = {"/usr", "/lib", "/lib64", os.path.realpath(sys.base_prefix), sys.prefix,
             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    return {p: p for p in sorted(paths) if os.path.exists(p)}


@pytest.mark.slow
@pytest.mark.beside  # a whole run on containers (~20 s), judged by state: faults reverted, none left, both served
def test_docker_target_kill_and_pause(tmp_path):
    client = engine_or_skip()
    cmd = [sys.executable, "-m", "chaos", "reference", "serve", "--preset", "tiny", "--port", "{port}",
           "--replica-id", "d{replica}", "--threads", "1"]
    exp = {
        "name": "docker-faults",
        "target": {"kind": "docker", "image": IMAGE, "replicas": 2, "command": cmd, "volumes": mounts(),
                   "model": "chaos-reference", "startup_timeout": "60s"},
        "load": {"workload": "chat", "users": 2, "duration": "10s", "output_tokens": "4-8",
                 "timeouts": {"connect": "2s", "first_token": "5s", "total": "10s"}},
        "faults": [{"type": "pause_instance", "at": "2s", "instance": 0, "duration": "2s"},
                   {"type": "kill_instance", "at": "5s", "instance": 1, "restart_after": "2s"}],
        "verify": {"served_by_all": True},
    }
    f = tmp_path / "docker.yaml"
    f.write_text(json.dumps(exp))  # JSON is YAML
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "chaos", "run", str(f), "--out", str(run_dir)], capture_output=True,
                       text=True, timeout=240)
    assert r.returncode in (0, 1, 4), r.stdout[-3000:] + r.stderr[-2000:]
    rep = report(run_dir)
    assert all(x["applied"] and x["reverted"] for x in rep["faults"])
    kinds = {x["outcome"] for x in map(json.loads, open(run_dir / "requests.jsonl"))}
    assert "ok" in kinds and kinds - {"ok"}, "the paused and the killed container must have cost requests"
    served = {x["served_by"] for x in map(json.loads, open(run_dir / "requests.jsonl")) if x["outcome"] == "ok"}
    assert served == {"d0", "d1"}
    assert unreverted(run_dir) == []
    left = client.containers.list(all=True, filters={"label": f"llm-chaos.run={os.path.abspath(run_dir)}"})
    assert left == []
