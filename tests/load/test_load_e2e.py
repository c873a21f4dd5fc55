"""chaos.load end to end: real Locust processes against real servers over loopback."""

import json
import os
import subprocess
import sys

import pytest

from chaos.load.driver import LoadConfig, Timeouts, run_load
from chaos.records import read_records
from chaos.load.shapes import arrival_rate, fixed, replay, steps
from chaos.load.workloads import WorkloadSpec
from chaos.reference.launcher import start_server
from tests.reference.http_util import metric

from .scripted_server import ScriptedServer

CHAT = [(WorkloadSpec("chat", input_tokens="24-40", output_tokens="4-8"), 1.0)]


def run(target, plan, tmp_path, workload=CHAT, **kw):
    cfg = LoadConfig(target=target, plan=plan, workload=workload, out_dir=str(tmp_path / "out"), **kw)
    result = run_load(cfg, progress=lambda line: None)
    return result, read_records(result.records_path)


@pytest.fixture(scope="module")
def reference():
    with start_server(["--preset", "tiny", "--replica-id", "L0"]) as s:
        yield s


@pytest.mark.slow
def test_records_are_complete_and_consistent(reference, tmp_path):
    before = metric(reference.base_url, "vllm:generation_tokens_total")
    # stability probes ride along (docs/stability.md): free to stop, so their lengths are not the chat's 4-8
    probes = [(WorkloadSpec("stability", extra={"prompts": 2, "structured": 1, "max_tokens": 8}), 0.5)]
    result, records = run(reference.base_url, fixed(4, 2.0), tmp_path, workload=CHAT + probes)
    assert len(records) >= 8
    assert len({r.id for r in records}) == len(records)
    for r in records:
        assert r.outcome == "ok", r
        # with ignore_eos a random model may produce only special tokens: tokens, but no text to time
        assert r.t_sched <= r.t_start <= (r.t_first if r.chunks else r.t_start) <= r.t_end
        assert (4 <= r.output_tokens <= 8 if r.case == "chat" else r.output_tokens <= 8)
        assert r.output_tokens_source == "usage" and r.v == 3
        assert len(r.output_sha) == 16 and len(r.output_head) <= 80 and r.garbled >= 0 and 0 <= r.repeat_ngram <= 1
        # judged only where JSON was asked for: the structured probe (the reference server ignores response_format)
        assert (r.json_valid is None) == (r.stability_key != "s1-json_object")
    keyed = [r for r in records if r.stability_key]
    assert {r.stability_key for r in keyed} <= {"s0-chat", "s1-json_object"} and keyed
    assert all(r.case == "stability" and not r.ignore_eos and r.requested_tokens == 8 for r in keyed)
    for key in {r.stability_key for r in keyed}:  # one replica, greedy: one answer a probe
        assert len({r.output_sha for r in keyed if r.stability_key == key}) == 1
        assert r.input_tokens_source == "exact" and r.served_by == "L0" and r.step == "users=4"
        if r.chunks > 1:  # random bytes can merge in the UTF-8 decoder; gaps need two chunks
            assert r.max_itl is not None and r.itl_p50 <= r.max_itl
    generated = metric(reference.base_url, "vllm:generation_tokens_total") - before
    assert sum(r.output_tokens for r in records) == generated  # every token the server made is accounted for
    assert result.steps[0].ok == len(records) and result.steps[0].error_rate == 0
    summary = json.load(open(os.path.join(result.out_dir, "summary.json")))
    assert summary["token_counts"] == "exact" and summary["steps"][0]["ttft"]["p99"] > 0
    stats = open(os.path.join(result.out_dir, "locust_stats.csv")).read()
    for name in ("TTFT chat", "TPOT chat", "E2E chat"):
        assert name in stats
    assert os.path.exists(os.path.join(result.out_dir, "locust.html"))


@pytest.mark.slow
def test_timings_agree_with_a_server_whose_delays_we_control(tmp_path):
    with ScriptedServer("ok", first_delay=0.2, gap=0.05, tokens=6) as srv:
        _, records = run(srv.url, fixed(2, 3.0, max_requests=6), tmp_path)
    assert len(records) == 6 and srv.received == 6
    ttfts = sorted(r.t_first - r.t_start for r in records)
    gaps = sorted(r.itl_p50 for r in records)
    median = len(records) // 2
    # The server waits exactly that long, so a measure can't be early; on a busy 2-core box it may be late by
    # the scheduler's delay (10.5 ms was seen with a neighbour): a margin that holds there, not only when idle.
    assert 0.2 - 0.005 <= ttfts[median] < 0.2 + 0.03, ttfts
    assert abs(gaps[median] - 0.05) < 0.02, gaps
    assert all(r.output_tokens == 6 and r.chunks == 6 and r.served_by == "scripted-1" for r in records)


def test_a_stream_that_ends_with_done_but_no_finish_reason_is_a_stream_error(tmp_path):
    """200 and [DONE] with no finish_reason anywhere: llama-cpp-python's server cuts concurrent streams short so."""
    with ScriptedServer("ok", gap=0.01, finish=None) as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=2), tmp_path,
                         timeouts=Timeouts(connect=2, first_token=1.0, total=5))
    assert records and all(r.status == 200 and r.outcome == "stream_error" and r.error_code == "no_finish_reason"
                           for r in records), records


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_keep_alive_off_sends_each_request_on_a_connection_of_its_own(tmp_path):
    """A target's keep_alive: false (llama-server closes connections it promised to keep): every request goes
    on a new connection, even to a server that would keep it, and says `Connection: close`."""
    with ScriptedServer("ok", gap=0.001) as srv:
        _, kept = run(srv.url, fixed(1, 10.0, max_requests=6), tmp_path / "kept")
        kept_connections, srv.connections = srv.connections, 0
        _, fresh = run(srv.url, fixed(1, 10.0, max_requests=6), tmp_path / "fresh", keep_alive=False)
        assert len(kept) == len(fresh) == 6 and all(r.outcome == "ok" for r in kept + fresh)
        assert kept_connections < 6 <= srv.connections, (kept_connections, srv.connections)


def test_without_a_gateway_who_served_is_where_the_request_went(tmp_path):
    """host_ids: the load goes straight to the replicas, and none names itself: a request is its replica's."""
    with ScriptedServer("ok", gap=0.001, served_by=None) as a, ScriptedServer("ok", gap=0.001, served_by=None) as b:
        _, records = run(a.url, fixed(1, 10.0, max_requests=6), tmp_path, also=[b.url], host_ids=["r0", "r1"])
    assert sorted(r.served_by for r in records) == ["r0"] * 3 + ["r1"] * 3
    assert a.received == b.received == 3


@pytest.mark.parametrize("mode,outcome,code", [
    ("http429", "http_error", "rate_limit_exceeded"),
    ("reset_early", "reset", None),
    ("reset_mid", "reset", None),
    ("stall", "timeout", None),
    ("no_done", "stream_error", "no_done"),
    ("garbage", "stream_error", "malformed_chunk"),
    ("error_event", "stream_error", "engine_dead"),
    ("json_bad", "bad_output", "invalid_json"),
])
@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_outcome_classes_from_real_causes(tmp_path, mode, outcome, code):
    wl = [(WorkloadSpec("json" if mode == "json_bad" else "chat", input_tokens="30-40", output_tokens="5"), 1.0)]
    with ScriptedServer(mode, gap=0.01) as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=2), tmp_path, workload=wl,
                         timeouts=Timeouts(connect=2, first_token=1.0, total=5))
    assert records, "no records"
    r = records[0]
    assert r.outcome == outcome, r
    if code:
        assert r.error_code == code
    if mode == "http429":
        assert r.status == 429
    if mode == "stall":
        assert r.timeout_kind == "first_token"


@pytest.mark.slow
def test_connect_error_and_json_ok(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    cfg = LoadConfig(target=f"http://127.0.0.1:{port}", plan=fixed(1, 5, max_requests=2), workload=CHAT,
                     out_dir=str(tmp_path / "o"), model="m")
    from chaos.load.driver import LoadRun

    run_ = LoadRun(cfg, progress=lambda _: None)
    run_.model, run_.tokenizer = "m", "estimate"
    # discover() would refuse an unreachable target; go past it to see the user classify the refusal.
    import chaos.load.driver as driver

    orig = driver.discover
    driver.discover = lambda c: ("m", "estimate")
    try:
        run_.start()
        run_.wait(0)
    finally:
        driver.discover = orig
    records = read_records(run_.records_path)
    assert records and all(r.outcome == "connect_error" and r.status is None for r in records)
    wl = [(WorkloadSpec("json", input_tokens="30-40", output_tokens="5"), 1.0)]
    with ScriptedServer("json_ok") as srv:
        _, ok = run(srv.url, fixed(1, 10.0, max_requests=2), tmp_path / "j", workload=wl)
    assert ok and all(r.outcome == "ok" for r in ok)


@pytest.mark.slow
def test_total_timeout_and_retries_honour_retry_after(tmp_path):
    with ScriptedServer("ok", first_delay=0.0, gap=0.5, tokens=10) as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=1), tmp_path,
                         timeouts=Timeouts(connect=2, first_token=2, total=1.0))
    assert records[0].outcome == "timeout" and records[0].timeout_kind == "total"
    with ScriptedServer("http429") as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=1), tmp_path / "r", retries=2)
    assert srv.received == 3
    assert records[0].retries == 2 and records[0].retry_statuses == [429, 429]


@pytest.mark.slow
def test_requests_cut_by_the_end_are_cancelled(tmp_path):
    with ScriptedServer("ok", gap=1.0, tokens=30) as srv:
        plan = fixed(2, 1.5)
        plan.stop_timeout = 0
        _, records = run(srv.url, plan, tmp_path)
    assert records and all(r.outcome == "cancelled" for r in records)


@pytest.mark.slow
def test_steps_each_get_a_summary(reference, tmp_path):
    result, records = run(reference.base_url, steps([1, 3], 1.5), tmp_path)
    assert [s.step for s in result.steps] == ["users=1", "users=3"]
    assert all(s.ok > 0 for s in result.steps)
    assert {r.step for r in records} == {"users=1", "users=3"}
    assert "users=3" in result.table() and "all" in result.table()


@pytest.mark.slow
def test_open_loop_rate_counts_from_intended_send_time(tmp_path):
    with ScriptedServer("ok", first_delay=0.0, gap=0.3, tokens=4) as srv:
        # 10/s of ~1 s requests with a pool of only 2 users: the generator must fall behind, and say so.
        result, records = run(srv.url, arrival_rate([10], 2.0, max_users=2), tmp_path)
    sched = sorted(r.t_sched for r in records)
    gaps = [b - a for a, b in zip(sched, sched[1:])]
    assert all(abs(g - 0.1) < 1e-6 for g in gaps)
    s = result.steps[0]
    assert s.open_loop and s.late_requests > 0 and s.max_lag_s > 0.3
    assert s.e2e["p50"] > 0.9  # measured from the intended time, so the wait in the generator counts
    assert "generator fell behind" in result.table()


@pytest.mark.slow
def test_replay_keeps_original_timing_scaled(reference, tmp_path):
    log = tmp_path / "prod.jsonl"
    entries = [{"timestamp": 1000 + 2 * i, "case": f"c{i}", "messages": [{"role": "user", "content": f"q{i}"}],
                "max_tokens": 3} for i in range(4)]
    entries.append({"timestamp": 1008, "case": "empty", "messages": []})  # an abnormal input from production
    log.write_text("\n".join(json.dumps(e) for e in entries))
    wl = [(WorkloadSpec("replay", replay_file=str(log)), 1.0)]
    result, records = run(reference.base_url, replay(4.0, speed=4.0, max_users=4), tmp_path, workload=wl)
    by_case = {r.case: r for r in records}
    assert set(by_case) >= {"c0", "c1", "c2", "c3", "empty"}
    t0 = by_case["c0"].t_sched
    assert by_case["c2"].t_sched - t0 == pytest.approx(1.0, abs=0.01)  # 4 s in the log, 4x faster
    assert by_case["empty"].outcome == "http_error" and by_case["empty"].status == 400


@pytest.mark.slow
def test_master_and_two_workers_write_one_complete_file(tmp_path):
    with ScriptedServer("ok", gap=0.01, tokens=3) as srv:
        result, records = run(srv.url, fixed(4, 2.0), tmp_path, workers=2)
        received = srv.received
    assert received > 10
    assert len(records) == received  # every request any worker sent is in the master's one file
    assert {r.worker for r in records} == {"w0", "w1"}
    assert len({r.id for r in records}) == len(records)
    assert not os.path.exists(os.path.join(result.out_dir, "requests-w0.jsonl"))


@pytest.mark.slow
def test_cli_prints_the_table_and_bad_input_is_exit_2(reference, tmp_path):
    out = tmp_path / "cli"
    p = subprocess.run([sys.executable, "-m", "chaos", "load", reference.base_url, "--workload", "chat",
                        "--users", "2", "--duration", "1s", "--out", str(out), "--output-tokens", "4"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "TTFT p50/p95/p99 ms" in p.stdout and "users=2" in p.stdout
    bad = subprocess.run([sys.executable, "-m", "chaos", "load", "http://127.0.0.1:9", "--duration", "1s",
                          "--out", str(tmp_path / "bad")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot reach the target" in bad.stderr and "Traceback" not in bad.stderr
    typo = subprocess.run([sys.executable, "-m", "chaos", "load", reference.base_url, "--workload", "poetry"],
                          capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and "unknown workload 'poetry'" in typo.stderr


@pytest.mark.slow
def test_ui_serves_locust_web_ui_on_loopback(reference, tmp_path):
    import threading
    import time
    import urllib.request

    from chaos.targets.base import free_port

    port = free_port()
    seen = {}

    def probe():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "status" not in seen:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=1) as r:
                    seen["status"], seen["body"] = r.status, json.load(r)
            except OSError:
                time.sleep(0.2)

    t = threading.Thread(target=probe)
    t.start()
    # the UI stays up for the load and Locust's --autoquit 5 s after it: a short load leaves the probe time enough
    _, records = run(reference.base_url, fixed(2, 1.5), tmp_path, ui_port=port)
    t.join()
    assert seen.get("status") == 200 and "stats" in seen["body"]
    assert records


def test_connections_are_reused_when_the_end_marker_comes_late(tmp_path):
    with ScriptedServer("ok", tokens=3, terminator_delay=0.005) as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=12), tmp_path)
        connections = srv.connections
    assert len(records) == 12 and all(r.outcome == "ok" for r in records)
    assert connections <= 3  # one user, one kept-alive connection (plus the model probe)
