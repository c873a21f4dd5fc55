"""Network and LLM faults on a target's links, in whole runs: the shipped experiments in their short mode, the
Toxiproxy engine given by URL, and a SIGKILLed run's proxies and toxics undone by `chaos recover`."""

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import pytest

from chaos.common import same_process

from ..secretscan import ArgvWatch, files_leaking
from .conftest import leftovers, report, start_run, started_processes, unreverted, wait_journal
from .test_runs import chaos_run, skip_if_not_judged, write

# A 7 s fault from 4 s in (the steady-state gate has its 3 answers by then), then 6 s of load after it.
SHORT = ["--var", "LOAD_FOR=17s", "--var", "FAULT_AT=4s", "--var", "FAULT_FOR=7s", "--var", "PRESET=tiny"]
# rate-limited judges no percentile during its fault (network-jitter's P99 there needs 100 answers, stream-stall
# judges a window from 4 s into it): 5 s of it, and the same 6 s after it, so its last 10 s (the steady re-check)
# overlap the fault by the same 4 s as SHORT's.
SHORT_5S = ["--var", "LOAD_FOR=15s", "--var", "FAULT_AT=4s", "--var", "FAULT_FOR=5s", "--var", "PRESET=tiny"]


def records(run_dir) -> list[dict]:
    with open(run_dir / "requests.jsonl") as f:
        return [json.loads(line) for line in f]


def fault_window(run_dir) -> tuple[float, float]:
    f = report(run_dir)["faults"][0]
    assert f["applied"] and f["reverted"], f
    return f["applied_at"], f["reverted_at"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def toxiproxy_url(tmp_path_factory):
    """A Toxiproxy API that is not the run's own: a real toxiproxy-server when one is found, else the bundled
    one started here. Either way the run reaches it by URL, creates its proxies there and must delete them.
    One for the module: each run names its own proxies, and each test looks for its own names only."""
    tmp_path = tmp_path_factory.mktemp("toxiproxy")
    if os.environ.get("TOXIPROXY_URL"):
        yield os.environ["TOXIPROXY_URL"].rstrip("/")
        return
    port = _free_port()
    binary = shutil.which("toxiproxy-server")
    cmd = ([binary, "-host", "127.0.0.1", "-port", str(port)] if binary else
           [sys.executable, "-m", "chaos", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port)])
    log = open(tmp_path / "toxiproxy-server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url + "/version", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the Toxiproxy server did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def proxies_on(url: str) -> dict:
    with urllib.request.urlopen(url + "/proxies", timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_network_jitter_moves_r1s_latency_and_traffic(tmp_path):
    run_dir = tmp_path / "run"
    r = chaos_run("experiments/network-jitter.yaml", run_dir, *SHORT)
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    a, b = fault_window(run_dir)
    recs = [x for x in records(run_dir) if x["outcome"] == "ok" and x["t_first"]]
    ttft = {(who, during): [x["t_first"] - x["t_start"] for x in recs if x["served_by"] == who
                            and (a + 0.5 <= x["t_start"] < b - 0.5) == during]
            for who in ("r0", "r1") for during in (True, False)}
    # 200 ms ± 100 ms on every chunk from r1: its first tokens arrive at least 100 ms later than before
    assert statistics.median(ttft["r1", True]) >= statistics.median(ttft["r1", False]) + 0.1, ttft
    assert "latency 200 ms, jitter 100 ms" in report(run_dir)["faults"][0]["description"]
    assert "link r1" in report(run_dir)["faults"][0]["description"]
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []


@pytest.mark.slow
def test_upstream_timeout_retries_on_the_other_replica(tmp_path, toxiproxy_url):
    """Through a Toxiproxy server given by URL (the one a user runs): the run's proxy exists there during the run
    and is gone after it."""
    exp = open("experiments/upstream-timeout.yaml").read().replace(
        "  replicas: 2\n", f"  replicas: 2\n  toxiproxy: {{url: {toxiproxy_url}}}\n", 1)
    path = write(tmp_path, exp)
    run_dir = tmp_path / "run"
    r = chaos_run(path, run_dir, *SHORT)
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    rep = report(run_dir)
    # requests sent to the silent r1 were retried on r0: the gateway's scraped /metrics say so
    retries = (rep["server_metrics"]["instances"]["gw"].get("moved") or {}).get("gw_retries_total", 0)
    assert retries > 0, rep["server_metrics"]["instances"]["gw"]
    created = [e for e in map(json.loads, open(run_dir / "journal.jsonl")) if e["event"] == "links_creating"]
    assert created and created[0]["external"] and created[0]["toxiproxy"] == toxiproxy_url
    assert not any(name in proxies_on(toxiproxy_url) for name in created[0]["proxies"])  # deleted at the end
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []


@pytest.mark.slow
def test_stream_stall_is_cut_by_the_gateway_and_r1_ejected(tmp_path):
    run_dir = tmp_path / "run"
    r = chaos_run("experiments/stream-stall.yaml", run_dir, *SHORT)
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    recs = records(run_dir)
    # labelled from the proxy's log by request id: the gateway, not the proxy, answered the client
    stalled = [x for x in recs if (x.get("fault") or "").startswith("stall-r1; stall")]
    assert stalled, "some streams were stalled"
    cut = [x for x in stalled if x["outcome"] != "ok"]
    assert cut, "the gateway cut stalled streams"
    for x in cut:  # ended by the gateway's idle timeout after their 4th token, long before the client's own
        assert x["outcome"] == "stream_error" and x["error_code"] == "upstream_failed", x
        assert "sent nothing for 2s mid-stream" in x["error"] and x["t_end"] - x["t_start"] < 10
    for x in stalled:  # a stall under 2 s old when the fault was reverted ends there, and that stream goes on;
        # an answer that was no stream, or ended before its 4th token, had nothing to stall
        assert x in cut or "rule removed" in x["fault"] or "nothing to act on" in x["fault"], x
    a, b = fault_window(run_dir)
    late = [x for x in recs if a + 4 <= x["t_start"] < b - 0.5]  # after r1 was ejected, within the fault
    # r0 serves the new streams (r1, ejected, may be tried again when its ejection ends: margin for a busy box)
    assert late and sum(x["outcome"] == "ok" for x in late) >= 0.75 * len(late)
    assert all(x["outcome"] == "ok" for x in recs if not x.get("fault") and x["outcome"] != "cancelled")
    assert "fault stall-r1; stall" in open(run_dir / "report.md").read()
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []


@pytest.mark.slow
def test_rate_limited_retries_by_cause(tmp_path):
    run_dir = tmp_path / "run"
    r = chaos_run("experiments/rate-limited.yaml", run_dir, *SHORT_5S)
    skip_if_not_judged(r, run_dir)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    recs = records(run_dir)
    limited = [x for x in recs if (x.get("fault") or "").startswith("limited-30pct")]
    assert limited and all(429 in x["retry_statuses"] for x in limited if x["retries"])
    assert sum(x["retries"] for x in recs) >= len(limited) * 0.8  # nearly every hit was retried
    md = open(run_dir / "report.md").read()
    assert "retries by cause: 429" in md
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []


KILLED = """\
name: killed-with-links
target:
  kind: reference
  replicas: 1
  preset: tiny
  startup_timeout: 30s
  toxiproxy: {{url: {url}}}
load: {{workload: chat, users: 2, duration: 30s, output_tokens: 8-16}}
faults:
  - {{type: latency, name: slow, at: 1s, link: r0, latency: 50ms}}
  - {{type: token_delay, name: late, at: 1s, link: r0, delay: 10ms}}
"""


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
def test_recover_undoes_a_killed_runs_links(tmp_path, toxiproxy_url):
    """SIGKILL the run with a toxic and a proxy rule on: recover deletes the proxy it made on the user's server
    (toxic and all) and stops the LLM proxy it started."""
    path = write(tmp_path, KILLED.format(url=toxiproxy_url))
    run_dir = tmp_path / "run"
    p = start_run(str(path), run_dir)
    try:
        assert wait_journal(run_dir, "fault_applied", count=2, timeout=90), p.stdout.read() if p.poll() else ""
        created = next(e for e in map(json.loads, open(run_dir / "journal.jsonl")) if e["event"] == "links_creating")
        name = created["proxies"][0]
        assert [t["name"] for t in proxies_on(toxiproxy_url)[name]["toxics"]] == ["slow"]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    r = subprocess.run([sys.executable, "-m", "chaos", "recover", str(run_dir)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert name not in proxies_on(toxiproxy_url)
    assert f"deleted proxy {name}" in r.stdout
    assert not any(same_process(pid, ct) for pid, ct in started_processes(run_dir))  # the LLM proxy too
    assert leftovers(run_dir) == []


BAD_LINK = """\
name: bad-link
target: {kind: reference, replicas: 2, preset: tiny}
load: {workload: chat, users: 1, duration: 10s}
faults:
  - {type: latency, at: 2s, link: r7, latency: 10ms}
  - {type: stream_cut, at: 2s, link: gw, after_tokens: 2}
"""


def test_a_link_that_does_not_exist_is_a_file_line_error(tmp_path):
    path = write(tmp_path, BAD_LINK)
    r = subprocess.run([sys.executable, "-m", "chaos", "validate", str(path)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "exp.yaml:5:" in r.stderr and "no link 'r7'; this target has client, r0, r1" in r.stderr
    assert "exp.yaml:6:" in r.stderr and "no link 'gw'" in r.stderr


def test_an_unreachable_toxiproxy_url_stops_the_run_before_anything_starts(tmp_path):
    exp = BAD_LINK.replace("link: r7", "link: r1").replace("link: gw", "link: r0").replace(
        "preset: tiny}", f"preset: tiny, toxiproxy: {{url: 'http://127.0.0.1:{_free_port()}'}}}}")
    run_dir = tmp_path / "run"
    r = chaos_run(write(tmp_path, exp), run_dir)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no Toxiproxy API at http://127.0.0.1:" in r.stdout + r.stderr
    assert "drop toxiproxy.url" in r.stdout + r.stderr
    assert leftovers(run_dir) == []


@pytest.mark.slow
@pytest.mark.beside  # judges state, not time
def test_a_vendor_behind_both_proxies_keeps_its_key_out_of_their_logs(tmp_path, vendor):
    """An openai target (the reference server standing in for a vendor, with a key): the client link gets a
    Toxiproxy latency and an LLM proxy rule that fails the 2nd and 4th requests with a 503."""
    secret = 'sk-test-links/0123+4567=89&ab"cd\\ef'  # changed by URL-encoding, JSON escaping and base64
    srv = vendor
    exp = f"""\
name: vendor-links
target: {{kind: openai, base_url: "{srv.base_url}/v1", model: chaos-reference, api_key_env: VENDOR_KEY}}
load: {{workload: chat, users: 1, duration: 4s, output_tokens: 4}}
faults:
  - {{type: latency, name: slow, at: 0.5s, latency: 20ms}}
  - {{type: http_error, name: down-2-4, at: 0.5s, status: 503, occurrences: [2, 4]}}
"""
    run_dir = tmp_path / "run"
    with ArgvWatch(secret) as argv:
        r = chaos_run(write(tmp_path, exp), run_dir, env={"VENDOR_KEY": secret})
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    hit = [x for x in records(run_dir) if x.get("fault")]
    assert [(x["status"], x["fault"]) for x in hit] == [(503, "down-2-4; status")] * 2
    assert (run_dir / "llm-proxy-127.0.0.1_{}.log.jsonl".format(srv.base_url.rsplit(":", 1)[1])).exists()
    assert files_leaking(run_dir, secret) == []  # the proxies' logs too, in any encoding
    assert argv.looked > 10 and argv.leaks == [] and secret not in r.stdout + r.stderr
    assert leftovers(run_dir) == [] and unreverted(run_dir) == []
