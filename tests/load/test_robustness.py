"""The Locust user against a server that misbehaves, and on a machine whose wall clock steps: real processes,
loopback, the scripted server (tests/load/scripted_server.py)."""

import os
import time
import sys

import pytest

from chaos.load.driver import LoadConfig, LoadRun, Timeouts, run_load
from chaos.records import read_records
from chaos.load.shapes import fixed
from chaos.load.workloads import WorkloadSpec

from .scripted_server import ScriptedServer

CHAT = [(WorkloadSpec("chat", input_tokens="24-40", output_tokens="5"), 1.0)]


def run(target, plan, tmp_path, workload=CHAT, **kw):
    cfg = LoadConfig(target=target, plan=plan, workload=workload, out_dir=str(tmp_path / "out"), **kw)
    result = run_load(cfg, progress=lambda line: None)
    return result, read_records(result.records_path)


@pytest.mark.parametrize("odd,at", [
    ({"choices": ["x"]}, 0),  # a choice that is not an object
    ({"choices": [{"index": 0, "delta": "x"}]}, 0),  # a string delta
    ({"choices": [], "usage": [3, 5]}, -1),  # the usage chunk as a list
], ids=["choice-string", "delta-string", "usage-list"])
def test_a_chunk_of_the_wrong_shape_is_a_stream_error_and_not_retried(tmp_path, odd, at):
    # It raised AttributeError in the parser, which the user took for a failed connection: connect_error, and
    # (nothing having streamed) retried, so the server got the request three times.
    with ScriptedServer("ok", tokens=3, odd=odd, odd_at=at) as srv:
        _, records = run(srv.url, fixed(1, 10.0, max_requests=1), tmp_path, retries=2,
                         timeouts=Timeouts(connect=2, first_token=5, total=10))
        received = srv.received
    assert len(records) == 1
    r = records[0]
    assert (r.outcome, r.error_code) == ("stream_error", "malformed_chunk"), r
    assert "malformed chunk" in r.error and r.retries == 0 and received == 1


def test_early_ends_count_fixed_lengths_only_and_estimates_are_no_mismatch(tmp_path):
    # Every answer is one chunk that stops (finish_reason stop) before max_tokens 5. A chat request asked for 5:
    # it ended early. A json request's max_tokens is a cap: stopping is what it should do. The server's
    # prompt_tokens (3) differs from the workload's estimate (owned_by is not llm-chaos): expected, not news.
    wl = [(WorkloadSpec("chat", input_tokens="30-40", output_tokens="5"), 1.0),
          (WorkloadSpec("json", input_tokens="90-100", output_tokens="5"), 1.0)]
    with ScriptedServer("json_ok", finish="stop") as srv:
        result, records = run(srv.url, fixed(1, 20.0, max_requests=8), tmp_path, workload=wl)
    chat = [r for r in records if r.case == "chat"]
    json_ = [r for r in records if r.case == "json"]
    assert len(records) == 8 and chat and json_ and all(r.outcome == "ok" for r in records)
    assert all(r.fixed_output and r.ended_early for r in chat)
    assert not any(r.fixed_output or r.ended_early for r in json_)
    s = result.steps[0]
    assert s.ended_early == s.fixed_output == len(chat)
    assert s.token_counts == "estimate" and s.input_mismatch == 0
    assert f"ended early: {len(chat)} of {len(chat)} fixed-length" in result.table()
    assert "counted a different prompt size" not in result.table()


SITECUSTOMIZE = '''
import os, time
_real, _trigger, _on = time.time, os.environ["CHAOS_TEST_STEP_FILE"], []

def _stepped():  # the wall clock jumps by CHAOS_TEST_STEP_S once the trigger file exists, as NTP would step it
    if not _on and os.path.exists(_trigger):
        _on.append(float(os.environ["CHAOS_TEST_STEP_S"]))
    return _real() + (_on[0] if _on else 0.0)

time.time = _stepped
'''


@pytest.mark.slow
@pytest.mark.parametrize("step", [60.0, -60.0])
def test_the_user_times_on_the_monotonic_clock_when_the_wall_clock_steps(tmp_path, monkeypatch, step):
    # The Locust process gets a time.time that steps a minute mid-stream (a sitecustomize, so even a default
    # argument bound at import sees it). Timed on the wall clock, one gap would read 60 s (or negative) and a
    # forward step would end the 20 s plan before the other two requests were sent.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trigger = tmp_path / "stepped"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    monkeypatch.setenv("CHAOS_TEST_STEP_FILE", str(trigger))
    monkeypatch.setenv("CHAOS_TEST_STEP_S", str(step))

    def on_chunk(i):
        if i == 1:
            trigger.touch()

    with ScriptedServer("ok", gap=0.2, tokens=6, on_chunk=on_chunk) as srv:
        _, records = run(srv.url, fixed(1, 20.0, max_requests=3), tmp_path,
                         timeouts=Timeouts(connect=5, first_token=10, total=15))
    assert trigger.exists()
    assert len(records) == 3 and all(r.outcome == "ok" for r in records), records
    for r in records:
        assert len(r.itl_us) == 5 and 0 <= min(r.itl_us) and max(r.itl_us) < 5_000_000, r.itl_us
        assert 0 <= r.ttft < 5 and 0 <= r.e2e < 10 and r.t_sched <= r.t_start <= r.t_first <= r.t_end
    records.sort(key=lambda r: r.t_start)
    assert all(a.t_end <= b.t_start + 0.01 for a, b in zip(records, records[1:]))  # one timeline throughout
    assert records[-1].t_end - records[0].t_start < 15


@pytest.mark.slow
def test_a_wall_clock_step_before_locust_starts_does_not_move_its_records(tmp_path, monkeypatch):
    # Each Locust process once read its own wall-clock anchor: a step of the machine's clock between the driver's
    # start and Locust's would put every record seconds away from the faults. Here Locust's wall clock reads 60 s
    # ahead from its first instant; its records must still sit on the driver's timeline, inside the time the load
    # really ran.
    from chaos.load.clock import Clock

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trigger = tmp_path / "stepped"
    trigger.touch()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    monkeypatch.setenv("CHAOS_TEST_STEP_FILE", str(trigger))
    monkeypatch.setenv("CHAOS_TEST_STEP_S", "60")
    clock = Clock()
    with ScriptedServer("ok", tokens=3) as srv:
        cfg = LoadConfig(target=srv.url, plan=fixed(1, 20.0, max_requests=3), workload=CHAT,
                         out_dir=str(tmp_path / "out"), timeouts=Timeouts(connect=5, first_token=10, total=15))
        load = LoadRun(cfg, progress=lambda line: None, clock=clock)
        load.start()
        while load.poll():
            time.sleep(0.1)
        result = load.result()
    finished = clock.now()
    records = read_records(result.records_path)
    assert len(records) == 3 and all(r.outcome == "ok" for r in records), records
    assert all(load.t_start <= r.t_sched <= r.t_start <= r.t_end <= finished for r in records), \
        [(r.t_start - load.t_start, finished - load.t_start) for r in records]
