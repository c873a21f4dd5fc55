"""Server evidence: /metrics scraped through a run (chaos/run/scrape.py) and summarized for the report
(chaos/report/servermetrics.py). Parsing and summarizing on hand-written text; the scraper against real
reference replicas and a real gateway on 127.0.0.1."""

import json
import signal
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment
from chaos.reference.launcher import start_gateway, start_server
from chaos.report.servermetrics import MAX_POINTS, counter_lines, markdown_section, summarize_metrics
from chaos.rundir.files import METRICS_FILE
from chaos.run.scrape import EXTRA_CAP, NotPrometheus, Scraper, parse

from .conftest import leftovers, report

REPLICA = """\
# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="m"} 4.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 340.0
# TYPE vllm:request_success counter
vllm:request_success_total{finished_reason="length",model_name="m"} 10.0
vllm:request_success_created{finished_reason="length",model_name="m"} 1.7e+09
vllm:request_success_total{finished_reason="stop",model_name="m"} 5.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 15.0
vllm:e2e_request_latency_seconds_count{model_name="m"} 15.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 7.5
"""

GATEWAY = """\
# TYPE gateway:upstream_up gauge
gateway:upstream_up{pool="primary",replica="r0",state="up"} 1.0
gateway:upstream_up{pool="primary",replica="r1",state="ejected"} 0.0
# TYPE gateway:breaker_state gauge
gateway:breaker_state{pool="primary",replica="r0"} 0.0
gateway:breaker_state{pool="primary",replica="r1"} 2.0
# TYPE gateway:in_flight gauge
gateway:in_flight 4.0
# TYPE gateway:retries counter
gateway:retries_total 7.0
# TYPE gateway:served counter
gateway:served_total{pool="primary"} 90.0
gateway:served_total{pool="backup"} 10.0
"""


def test_parse_names_the_keys_and_sums_over_label_sets():
    v = parse(REPLICA)
    assert v["running"] == 3 and v["waiting"] == 2 and v["kv_usage"] == 0.25
    assert v["preemptions_total"] == 4 and v["prefix_cache_hits_total"] == 340
    assert v["requests_ok_total"] == 15  # length + stop
    # the rest as name{labels}, without buckets or *_created
    assert v['vllm:e2e_request_latency_seconds_count{model_name="m"}'] == 15
    assert not any("_bucket" in k or "_created" in k for k in v)


def test_a_declared_counter_without_samples_is_zero():
    """A labelled counter has no sample before its first event, only HELP and TYPE: it is 0, not missing."""
    v = parse("# HELP vllm:request_success_total Finished.\n# TYPE vllm:request_success_total counter\n"
              "vllm:num_requests_running 1\n")
    assert v == {"running": 1.0, "requests_ok_total": 0.0}


def test_a_counter_that_appears_late_counts_from_zero(tmp_path):
    path = tmp_path / METRICS_FILE
    _write(path, [{"t": 1.0, "instance": "v", "ok": True, "values": {"running": 0.0}},
                  {"t": 2.0, "instance": "v", "ok": True, "values": {"running": 0.0, "requests_ok_total": 4.0}}])
    s = summarize_metrics(str(path), 1.0)
    assert s["instances"]["v"]["moved"] == {"requests_ok_total": 4.0}
    assert s["series"]["requests_ok_total_rate"]["v"] == [[2.0, 4.0]]


def test_parse_takes_older_vllm_names_too():
    v = parse("vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.5\nvllm:gpu_cache_usage_perc{model_name=\"b\"} 0.75\n"
              "vllm:gpu_prefix_cache_hits_total 12\n")
    assert v["kv_usage"] == 0.75 and v["prefix_cache_hits_total"] == 12  # a fraction: the max, not a sum


def test_parse_gateway_keys_per_upstream():
    v = parse(GATEWAY)
    assert v["up.r0"] == 1 and v["up.r1"] == 0 and v["breaker.r1"] == 2 and v["breaker.r0"] == 0
    assert v["gw_upstreams_up"] == 1 and v["gw_ejected"] == 1
    assert v["gw_in_flight"] == 4 and v["gw_retries_total"] == 7 and v["gw_served_total"] == 100


def test_parse_caps_the_extra_series():
    text = "".join(f'vendor_thing{{i="{i}"}} {i}\n' for i in range(5000)) + "vllm:num_requests_running 1\n"
    v = parse(text)
    assert v["running"] == 1 and len(v) == EXTRA_CAP + 1


@pytest.mark.parametrize("text", ["<html><body>Not Found</body></html>", '{"detail": "Not Found"}', "Not Found",
                                  ""])
def test_parse_refuses_what_is_not_prometheus_text(text):
    with pytest.raises(NotPrometheus, match="not Prometheus text"):
        parse(text)


def _write(path, lines):
    with open(path, "w") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")


def test_summarize_counts_rates_and_unavailable(tmp_path):
    path = tmp_path / METRICS_FILE
    lines = []
    for i, c in enumerate([0, 10, 20, 5, 15]):  # a restart between the 3rd and 4th scrape: reset to 0, then 5
        lines.append({"t": 100.0 + i, "instance": "r0", "ok": True,
                      "values": {"running": float(i), "requests_ok_total": float(c), "x{a=\"1\"}": 1.0}})
    lines.append({"t": 105.0, "instance": "r0", "ok": False, "values": {}, "error": "connection refused"})
    lines += [{"t": 100.0 + i, "instance": "v", "ok": False, "values": {}, "error": "HTTP 404"} for i in range(2)]
    lines.append({"t": 102.0, "instance": "v", "ok": False, "values": {}, "unavailable": True,
                  "error": "no Prometheus /metrics: HTTP 404 (3 tries)"})
    _write(path, lines)
    with open(path, "a") as f:
        f.write('{"t": 106, "instance": "r0", "ok": tr')  # a killed run's last line, cut
    s = summarize_metrics(str(path), 1.0)
    assert s["file"] == METRICS_FILE and s["interval_s"] == 1.0
    assert s["instances"]["r0"] == {"scraped": 5, "failed": 1, "available": True, "why": None,
                                    "moved": {"requests_ok_total": 35.0}}  # 10 + 10 + 5 (restart) + 10
    assert s["instances"]["v"]["available"] is False and "HTTP 404" in s["instances"]["v"]["why"]
    assert s["series"]["running"]["r0"] == [[100.0 + i, float(i)] for i in range(5)]
    assert s["series"]["requests_ok_total_rate"]["r0"] == [[101.0, 10.0], [102.0, 10.0], [103.0, 5.0],
                                                           [104.0, 10.0]]
    assert not any("{" in k for k in s["series"])  # the extra samples stay in the file
    assert counter_lines(s) == ["r0: 35 requests finished"]
    assert summarize_metrics(str(tmp_path / "none.jsonl")) is None


def test_summarize_caps_a_long_run_and_keeps_the_rate(tmp_path):
    path = tmp_path / METRICS_FILE
    n = 5 * MAX_POINTS + 7
    _write(path, ({"t": float(i), "instance": "r0", "ok": True,
                   "values": {"waiting": float(i % 3), "preemptions_total": 2.0 * i}} for i in range(n)))
    s = summarize_metrics(str(path))
    assert s["interval_s"] == 1.0  # none given: the scrapes' spacing
    waiting, rate = s["series"]["waiting"]["r0"], s["series"]["preemptions_total_rate"]["r0"]
    assert len(waiting) <= MAX_POINTS + 1 and waiting[-1][0] == n - 1  # the end is always kept
    assert len(rate) <= MAX_POINTS + 1 and all(v == 2.0 for _, v in rate)
    assert s["instances"]["r0"]["moved"]["preemptions_total"] == 2.0 * (n - 1)


def test_markdown_section_tables_and_counter_lines(tmp_path):
    path = tmp_path / METRICS_FILE
    _write(path, [{"t": 10.0 + i, "instance": "r0", "ok": True,
                   "values": {"running": float(v), "preemptions_total": float(3 * i), "gw_retries_total": 0.0}}
                  for i, v in enumerate([1, 5, 2])])
    s = summarize_metrics(str(path), 1.0)
    md = "\n".join(markdown_section(s, t0=10.0))
    assert "## Server metrics" in md and "r0 3 scrapes" in md
    assert "| running | 1 | 2 | 5 | +1.0s | 2 |" in md
    assert "| preemptions_total_rate (per s) | 3 | 3 | 3 |" in md
    assert "Always 0: gw_retries_total_rate." in md and "- r0: 6 preemptions" in md
    assert "Not scraped" in "\n".join(markdown_section(None, None))


BAD_INTERVAL = """\
name: t
target: {kind: reference, replicas: 1, preset: tiny}
load: {workload: chat, users: 1, duration: 5s}
metrics:
  interval: 10ms
"""


@pytest.mark.parametrize("value,expected", [("2s", 2.0), ("250ms", 0.25), ("off", 0.0), ("0", 0.0),
                                            ('"off"', 0.0)])
def test_the_metrics_interval_key(tmp_path, value, expected):
    p = tmp_path / "exp.yaml"
    p.write_text(BAD_INTERVAL.replace("10ms", value))
    assert load_experiment(str(p)).metrics_interval == expected


def test_a_bad_metrics_interval_names_file_and_line(tmp_path):
    p = tmp_path / "exp.yaml"
    p.write_text(BAD_INTERVAL)
    with pytest.raises(ExperimentError) as e:
        load_experiment(str(p))
    (problem,) = e.value.problems
    assert problem.startswith(f"{p}:5:13: metrics.interval: '10ms' is not a duration from 0.1s to 1h"), problem


# -- against real servers ----------------------------------------------------------------------------------------

@dataclass
class Inst:
    id: str
    url: str

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def metrics_headers(self) -> dict:
        return {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_too_busy_to_answer_is_not_given_up(tmp_path):
    """A listening socket nobody answers on (LiteLLM's one worker under load): every scrape times out, and it is
    still asked, where a port with nothing listening is given up after GIVE_UP refusals."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(16)  # the kernel completes connections; nothing ever reads them
    try:
        insts = [Inst("busy", f"http://127.0.0.1:{busy.getsockname()[1]}"),
                 Inst("none", f"http://127.0.0.1:{_free_port()}")]
        sc = Scraper(lambda: insts, str(tmp_path), interval=0.3, timeout=0.2)
        sc.start()
        assert _until(lambda: sc.states.get("busy") is not None and sc.states["busy"].failed >= 5, 20)
        sc.stop()
    finally:
        busy.close()
    assert sc.states["busy"].available and sc.states["busy"].failed >= 3
    assert not sc.states["none"].available and "tries" in sc.states["none"].why


def _chat(url: str) -> None:
    body = json.dumps({"model": "chaos-reference", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 8, "stream": False}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
    except OSError:
        pass  # the replica killed under it: the scraper's evidence, not this test's


def _lines(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _until(cond, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_scraper_against_real_replicas_and_gateway(tmp_path):
    r0 = start_server(["--preset", "tiny", "--replica-id", "r0"])
    r1 = start_server(["--preset", "tiny", "--replica-id", "r1"])
    gw = None
    try:
        gw = start_gateway([r0, r1])
        nobody = f"http://127.0.0.1:{_free_port()}"  # nothing listens here
        insts = [Inst("r0", r0.base_url), Inst("r1", r1.base_url), Inst("gw", gw.base_url), Inst("none", nobody)]
        sc = Scraper(lambda: insts, str(tmp_path), interval=0.25, max_duration=120)
        sc.start()
        try:
            path = tmp_path / METRICS_FILE
            assert _until(lambda: path.exists() and {x["instance"] for x in _lines(path) if x["ok"]} >= {
                "r0", "r1", "gw"}), "every live instance scraped"
            workers = [threading.Thread(target=_chat, args=(u,)) for u in (r0.base_url, r1.base_url, gw.base_url)
                       for _ in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(90)
            time.sleep(1.0)  # a few scrapes after the requests finished: the counters moved
            r1.signal(signal.SIGKILL)  # our own replica's process group
            r1.proc.wait(10)
            killed_at = time.time()
            assert _until(lambda: any(x["instance"] == "r1" and not x["ok"] and x["t"] > killed_at
                                      for x in _lines(path))), "the killed replica's scrapes fail"
            assert _until(lambda: any(x["instance"] == "r0" and x["ok"] and x["t"] > killed_at + 0.5
                                      for x in _lines(path))), "and the others are still scraped"
            r0.signal(signal.SIGSTOP)  # paused: its socket accepts, nothing answers
            try:
                paused_at = time.time()
                assert _until(lambda: any(x["instance"] == "r0" and not x["ok"] and x["t"] > paused_at
                                          for x in _lines(path))), "a paused replica's scrape times out"
                assert _until(lambda: any(x["instance"] == "gw" and x["ok"] and x["t"] > paused_at + 1
                                          for x in _lines(path))), "without holding the others back"
            finally:
                r0.signal(signal.SIGCONT)
            resumed_at = time.time()
            assert _until(lambda: any(x["instance"] == "r0" and x["ok"] and x["t"] > resumed_at
                                      for x in _lines(path))), "and answers again once resumed"
            assert sc.running
        finally:
            kept = sc.stop(final=True)
        assert not sc.running and set(kept) == {"r0", "gw"}
        assert "vllm:num_requests_running" in (tmp_path / "metrics-r0.txt").read_text()
        assert sc.unavailable() == {"none": sc.states["none"].why} and "tries" in sc.unavailable()["none"]
    finally:
        for s in (gw, r1, r0):
            if s is not None:
                s.stop()

    lines = _lines(tmp_path / METRICS_FILE)
    r0_ok = [x for x in lines if x["instance"] == "r0" and x["ok"]]
    for key in ("running", "waiting", "kv_usage"):
        assert all(isinstance(x["values"][key], float) for x in r0_ok), key
    none = [x for x in lines if x["instance"] == "none"]
    assert len(none) == 3 and not any(x["ok"] for x in none) and none[-1]["unavailable"]  # then no more
    dead = [x for x in lines if x["instance"] == "r1" and not x["ok"]]
    assert dead and all(x["error"] for x in dead)

    s = summarize_metrics(str(tmp_path / METRICS_FILE), 0.25)
    assert s["instances"]["none"]["available"] is False and s["instances"]["none"]["scraped"] == 0
    assert s["instances"]["r1"]["available"] is True and s["instances"]["r1"]["failed"] >= 1
    assert set(s["series"]["running"]) == {"r0", "r1"} and "gw_in_flight" in s["series"]
    assert s["series"]["requests_ok_total_rate"]["r0"], "a counter's rate series"
    assert s["series"]["breaker.r0"]["gw"] and s["series"]["up.r1"]["gw"]
    moved = sum(s["instances"][i].get("moved", {}).get("requests_ok_total", 0) for i in ("r0", "r1"))
    assert moved >= 1, s["instances"]


@pytest.mark.slow
def test_a_run_scrapes_and_reports_server_metrics(three_faults_run):
    """The shared real run (tests/conftest.py): r1 killed and restarted, its link stalled, the client's link down."""
    run_dir = three_faults_run.out
    events = [json.loads(line) for line in open(run_dir / "journal.jsonl")]
    started = next(e for e in events if e["event"] == "metrics_scraping")
    assert started["interval"] == 0.5 and {i["id"] for i in started["instances"]} == {"r0", "r1", "gw"}
    load_started = next(e["t"] for e in events if e["event"] == "load_started")
    assert started["t"] <= load_started  # before the load
    lines = _lines(run_dir / METRICS_FILE)
    assert {x["instance"] for x in lines if x["ok"]} == {"r0", "r1", "gw"}
    killed = next(e["t"] for e in events if e["event"] == "fault_applied" and e["fault"] == "kill-r1")
    back = next(e["t"] for e in events if e["event"] == "fault_reverted" and e["fault"] == "kill-r1")
    down = [x["t"] for x in lines if x["instance"] == "r1" and not x["ok"]]
    assert down and all(killed - 1 <= t <= back + 1 for t in down)  # r1 unreachable only while it was dead
    assert any(x["instance"] == "r1" and x["ok"] and x["t"] > back for x in lines)  # and scraped again after
    sm = report(run_dir)["server_metrics"]
    assert sm["interval_s"] == 0.5 and set(sm["instances"]) == {"r0", "r1", "gw"}
    assert sm["series"]["running"]["r0"] and sm["series"]["gw_served_total_rate"]["gw"]
    # the last scrape, whole, as before
    assert (run_dir / "metrics-r0.txt").exists() and (run_dir / "metrics-gw.txt").exists()
    assert leftovers(run_dir) == []
