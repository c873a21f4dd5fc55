"""abort_when on the stack's own monitoring: a scraped metric of an instance, and a PromQL query against a real
Prometheus (Debian's 2.42) scraping the run's instances through the file_sd targets the run writes."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment
from chaos.run.stops import MetricStop, PromStop, Stops, ask_prometheus

from .test_runs import chaos_run


def test_a_metric_stops_only_once_it_has_held_for_the_whole_window():
    s = Stops([MetricStop("waiting", 10, "r0")], None, span=2.0)
    s.feed_scrape(100.0, "r0", {"waiting": 12})
    s.feed_scrape(101.0, "r1", {"waiting": 50})  # another instance: not this condition's
    assert s.check(101.5) is None
    s.feed_scrape(101.5, "r0", {"waiting": 9})  # a break: the window starts again
    s.feed_scrape(102.0, "r0", {"waiting": 11})
    assert s.check(103.9) is None
    said = s.check(104.0)
    assert said.startswith("waiting of r0 above 10 held for 2.0s") and "waiting of r0 = 11" in said


def test_a_condition_no_longer_observed_does_not_fire():
    s = Stops([MetricStop("waiting", 10, "r0")], None, span=2.0)
    s.feed_scrape(100.0, "r0", {"waiting": 12})
    s.feed_scrape(101.0, "r0", {"waiting": 12})
    assert s.check(102.5) is not None  # held 2.5 s, seen 1.5 s ago
    assert s.check(107.0) is None  # r0 stopped answering: 6 s without an observation


def test_any_instance_is_watched_each_on_its_own_and_a_missing_key_is_no_observation():
    s = Stops([MetricStop("kv_usage", 0.9)], None, span=1.0)
    s.feed_scrape(10.0, "r0", {"kv_usage": 0.95})
    s.feed_scrape(10.0, "r1", {"kv_usage": 0.2})
    s.feed_scrape(10.5, "r0", {})  # a scrape without the key neither holds nor breaks
    assert "kv_usage of r0 above 0.9" in s.check(11.0)


def _exp(tmp_path, abort: str, target: str = "{kind: reference, replicas: 1, preset: tiny}"):
    p = tmp_path / "exp.yaml"
    p.write_text(f"name: x\ntarget: {target}\nload: {{workload: chat, users: 1, duration: 10s}}\n"
                 f"abort_when: {abort}\n")
    return str(p)


def test_abort_when_takes_metrics_or_prometheus_alone_and_refuses_a_remote_prometheus(tmp_path):
    exp = load_experiment(_exp(tmp_path, "{metrics: [{key: waiting, above: 5}], for: 3s}"))
    assert exp.abort_error_rate is None and exp.abort_stops == {"metrics": [{"key": "waiting", "above": 5}]}
    with pytest.raises(ExperimentError, match="not a loopback address"):
        load_experiment(_exp(tmp_path, "{prometheus: {url: 'http://prom.example.com:9090', query: up}}"))
    with pytest.raises(ExperimentError):
        load_experiment(_exp(tmp_path, "{for: 3s}"))  # nothing to stop on


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(tmp_path):
    """A real Prometheus scraping tmp_path/run/prometheus-targets.json (the run writes it) every second."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; .ci/run installs it)")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: chaos
    file_sd_configs: [{{files: ["{run_dir}/prometheus-targets.json"], refresh_interval: 1s}}]
""")
    port = _free_port()
    proc = subprocess.Popen([exe, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url + "/-/ready", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("Prometheus did not become ready: " + (tmp_path / "prometheus.log").read_text()[-2000:])
        yield url, run_dir
    finally:
        proc.terminate()
        proc.wait(20)


STOPPING = """name: stops
target: {{kind: reference, replicas: 2, preset: tiny, startup_timeout: 60s}}
load: {{workload: chat, users: 2, duration: 30s, output_tokens: 4-8,
        timeouts: {{connect: 2s, first_token: 5s, total: 10s}}}}
steady_state: {{window: 4s, slo: {{p95_latency: 5s, error_rate: 1%}}}}
faults:
  - {{type: server_hook, at: 8s, instance: r0, fail_fraction: 1.0, duration: 20s}}
abort_when:
  for: 2s
  {condition}
"""


def _abort_event(run_dir):
    events = [json.loads(x) for x in open(run_dir / "journal.jsonl")]
    applied = next(e["t"] for e in events if e["event"] == "fault_applied")
    abort = next(e for e in events if e["event"] == "abort")
    return applied, abort


@pytest.mark.slow
def test_a_promql_query_on_the_runs_instances_stops_the_run(prometheus, tmp_path):
    url, run_dir = prometheus
    assert ask_prometheus(url, "up") == []  # no target yet: the run writes them
    query = 'sum(increase(chaos:http_errors_total{chaos_instance="r0"}[5s])) > 0'
    exp = tmp_path / "exp.yaml"
    exp.write_text(STOPPING.format(condition=f"prometheus: {{url: '{url}', query: '{query}', every: 1s}}"))
    r = chaos_run(exp, run_dir, timeout=180)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    applied, abort = _abort_event(run_dir)
    assert abort["reason"].startswith(f"Prometheus query {query!r} held for") and abort["t"] > applied + 2.0
    targets = json.loads((run_dir / "prometheus-targets.json").read_text())
    assert sorted(g["labels"]["chaos_instance"] for g in targets) == ["r0", "r1"]
    assert ask_prometheus(url, 'max_over_time(up{chaos_instance="r1"}[5m]) == 1'), "it scraped the run's r1"
    assert "aborted" in (run_dir / "report.md").read_text().lower() or "ABORTED" in r.stdout


@pytest.mark.slow
def test_a_scraped_metric_stops_the_run(tmp_path):
    run_dir = tmp_path / "run"
    exp = tmp_path / "exp.yaml"
    exp.write_text(STOPPING.format(condition="metrics: [{instance: r0, key: http_errors_total, above: 3}]"))
    r = chaos_run(exp, run_dir, timeout=180)
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    applied, abort = _abort_event(run_dir)
    assert abort["reason"].startswith("http_errors_total of r0 above 3 held for") and abort["t"] > applied


def test_a_prometheus_that_cannot_be_asked_ends_the_run_before_the_load(tmp_path):
    run_dir = tmp_path / "run"
    exp = tmp_path / "exp.yaml"
    port = _free_port()  # nothing listens there
    exp.write_text(STOPPING.format(condition=f"prometheus: {{url: 'http://127.0.0.1:{port}', query: up}}"))
    r = chaos_run(exp, run_dir, timeout=120)
    assert r.returncode == 2 and f"cannot ask Prometheus at http://127.0.0.1:{port}" in r.stdout + r.stderr
    assert not os.path.exists(run_dir / "requests.jsonl") or not (run_dir / "requests.jsonl").read_text()
    assert PromStop("u", "q").describe() == "Prometheus query 'q'"
