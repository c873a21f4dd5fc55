"""Replica lifecycle with real processes and signals: drain, disconnects, fault hooks."""

import json
import signal
import socket
import threading
import time

import pytest

from chaos.reference.launcher import start_server

from .http_util import metric, post, read_rest, request, sse
from .http_util import open_stream as _open_stream

M = "chaos-reference"


def wait_for(cond, timeout=20.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return False


def open_stream(base_url, body):
    """A streamed request, returned once its first token has arrived."""
    return _open_stream(base_url, body, wait_first=True)


@pytest.mark.slow
def test_sigterm_drains_in_flight_streams_then_exits_0():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks", "--drain-timeout", "60"])
    try:
        post(s.base_url, "/admin/faults", {"step_delay_ms": 10})
        body = {"model": M, "prompt": "drain me", "max_tokens": 150, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        streams = [open_stream(s.base_url, body) for _ in range(3)]
        s.signal(signal.SIGTERM)
        # While draining: health says 503 and new work is refused with 503.
        assert wait_for(lambda: request(s.base_url, "GET", "/health")[0] == 503)
        status, headers, err = post(s.base_url, "/v1/completions", {"model": M, "prompt": "late"})
        assert status == 503 and err["error"]["code"] == "server_draining" and "retry-after" in headers
        for c, r in streams:
            events = read_rest(r)
            assert events[-1] == "[DONE]"
            assert json.loads(events[-2])["usage"]["completion_tokens"] == 150
            c.close()
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


@pytest.mark.slow
def test_drain_timeout_bounds_shutdown():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks", "--drain-timeout", "1"])
    try:
        post(s.base_url, "/admin/faults", {"step_delay_ms": 50})
        c, r = open_stream(s.base_url, {"model": M, "prompt": "long", "max_tokens": 900, "stream": True,
                                        "ignore_eos": True})
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        assert s.proc.wait(30) == 0
        assert time.monotonic() - t0 < 20  # far less than the 45 s the stream would need
        events = read_rest(r)
        assert "[DONE]" not in events  # cut, not completed
        c.close()
    finally:
        s.stop()


@pytest.mark.slow
def test_disconnect_mid_stream_aborts_and_frees_blocks():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks"])
    try:
        post(s.base_url, "/admin/faults", {"step_delay_ms": 20})
        c, r = open_stream(s.base_url, {"model": M, "prompt": "p" * 200, "max_tokens": 800, "stream": True,
                                        "ignore_eos": True})
        assert metric(s.base_url, "vllm:num_requests_running") == 1
        assert metric(s.base_url, "vllm:kv_cache_usage_perc") > 0
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        assert wait_for(lambda: metric(s.base_url, "vllm:num_requests_running") == 0, timeout=10)
        assert metric(s.base_url, "vllm:kv_cache_usage_perc") == 0
        generated = metric(s.base_url, "vllm:generation_tokens_total")
        assert generated < 800
        time.sleep(0.5)
        assert metric(s.base_url, "vllm:generation_tokens_total") == generated  # nothing runs on
    finally:
        s.stop()


@pytest.mark.slow
def test_fault_hooks_apply_and_revert():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks", "--fault-seed", "3"])
    try:
        body = {"model": M, "prompt": "fault", "max_tokens": 5, "temperature": 0, "ignore_eos": True}
        clean = post(s.base_url, "/v1/completions", body)[2]["choices"][0]["text"]
        # fail_fraction 1: every request is a 500 in OpenAI's shape; reverting restores service.
        post(s.base_url, "/admin/faults", {"fail_fraction": 1.0})
        status, _, err = post(s.base_url, "/v1/completions", body)
        assert status == 500 and err["error"]["code"] == "injected_fault"
        assert request(s.base_url, "DELETE", "/admin/faults/fail_fraction")[2]["active"] == {}
        assert post(s.base_url, "/v1/completions", body)[0] == 200
        # step_delay_ms: five tokens take at least five delays.
        post(s.base_url, "/admin/faults", {"step_delay_ms": 100})
        t0 = time.monotonic()
        assert post(s.base_url, "/v1/completions", body)[2]["choices"][0]["text"] == clean
        assert time.monotonic() - t0 >= 0.4
        request(s.base_url, "DELETE", "/admin/faults")
        # kv_block_cap: preemptions happen, every output is still right.
        long_body = {"model": M, "max_tokens": 60, "temperature": 0, "ignore_eos": True}
        prompts = [f"request number {i} " * 4 for i in range(8)]
        expected = [post(s.base_url, "/v1/completions", {**long_body, "prompt": p})[2]["choices"][0]["text"]
                    for p in prompts]
        post(s.base_url, "/admin/faults", {"kv_block_cap": 14})
        got = [None] * 8

        def run(i):
            got[i] = post(s.base_url, "/v1/completions", {**long_body, "prompt": prompts[i]})[2]["choices"][0]["text"]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert got == expected
        assert metric(s.base_url, "vllm:num_preemptions_total") > 0
        # A request that cannot fit under the cap fails cleanly, mid-stream as an error event.
        post(s.base_url, "/admin/faults", {"kv_block_cap": 2})
        status, _, events = sse(s.base_url, "/v1/completions", {"model": M, "prompt": "x" * 100, "stream": True,
                                                                "max_tokens": 4})
        assert status == 200 and events[-1] == "[DONE]"
        assert events[-2]["error"]["type"] == "server_error"
        request(s.base_url, "DELETE", "/admin/faults")
        assert post(s.base_url, "/v1/completions", {**body, "prompt": "x" * 100})[0] == 200
        # Unknown hook names are a clear 400.
        status, _, err = post(s.base_url, "/admin/faults", {"explode": 1})
        assert status == 400 and "unknown fault hook" in err["error"]["message"]
    finally:
        s.stop()


@pytest.mark.slow
def test_engine_failure_turns_health_503_and_errors_open_streams():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks"])
    try:
        post(s.base_url, "/admin/faults", {"step_delay_ms": 20})
        c, r = open_stream(s.base_url, {"model": M, "prompt": "doomed", "max_tokens": 500, "stream": True,
                                        "ignore_eos": True})
        post(s.base_url, "/admin/faults", {"engine_error": True})
        events = read_rest(r)
        c.close()
        assert events[-1] == "[DONE]" and "error" in json.loads(events[-2])
        assert request(s.base_url, "GET", "/health")[0] == 503
        status, _, err = post(s.base_url, "/v1/completions", {"model": M, "prompt": "after"})
        assert status == 503 and err["error"]["code"] == "engine_dead"
        assert s.proc.poll() is None  # the process stays up to say so
    finally:
        s.stop()


def test_crash_hook_kills_the_process():
    s = start_server(["--preset", "tiny", "--enable-fault-hooks"])
    try:
        assert post(s.base_url, "/admin/faults", {"crash": True})[0] == 200
        assert s.proc.wait(10) == -signal.SIGKILL
    finally:
        s.stop()


def test_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        import subprocess
        import sys

        p = subprocess.run([sys.executable, "-m", "chaos", "reference", "serve", "--preset", "tiny", "--port",
                            str(port)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in p.stderr and "--port" in p.stderr
    assert "Traceback" not in p.stderr
