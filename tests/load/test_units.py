"""Pure parts of chaos.load: SSE parsing, workloads, plans and schedules, summaries."""

import json
import random

import pytest

from chaos.records import RequestRecord
from chaos.common import parse_duration
from chaos.load.shapes import ArrivalSchedule, arrival_rate, fixed, plan_from, ramp, steps
from chaos.load.sse import StreamState, error_code_of
from chaos.records.summary import format_table, summarize
from chaos.load.replay.log import load_replay
from chaos.load.workloads import Workload, WorkloadSpec, parse_mix
from chaos.reference.tokenizer import ByteTokenizer


def test_stream_state_reads_chat_and_completion_chunks():
    s = StreamState()
    assert s.feed(b": keep-alive\n") == ""
    assert s.feed('data: {"choices":[{"delta":{"role":"assistant","content":""}}]}') == ""
    assert s.feed('data: {"system_fingerprint":"r1","choices":[{"delta":{"content":"Hi"}}]}\n') == "Hi"
    assert s.feed('data: {"choices":[{"text":" there","finish_reason":"stop"}]}') == " there"
    assert s.feed('data: {"choices":[],"usage":{"completion_tokens":2}}') == ""
    assert s.feed("data: [DONE]") == "" and s.done
    assert s.text == "Hi there" and s.usage["completion_tokens"] == 2 and s.served_by == "r1"
    assert s.finish_reason == "stop" and s.malformed is None


def test_stream_state_flags_garbage_and_error_events():
    s = StreamState()
    s.feed("data: {not json")
    assert "not JSON" in s.malformed
    e = StreamState()
    e.feed('data: {"error": {"message": "boom", "code": "engine_dead"}}')
    assert e.error["code"] == "engine_dead"
    assert error_code_of(b'{"error": {"code": "rate_limit_exceeded", "message": "m"}}') == ("rate_limit_exceeded", "m")
    assert error_code_of(b"<html>bad gateway</html>")[0] is None


def test_durations():
    assert parse_duration("90s") == 90 and parse_duration("2m") == 120 and parse_duration("250ms") == 0.25
    assert parse_duration(5) == 5.0
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("soon")


def test_workloads_are_reproducible_and_exact_for_the_byte_tokenizer():
    w1 = Workload([(WorkloadSpec("rag"), 1), (WorkloadSpec("chat"), 2)], seed=4)
    w2 = Workload([(WorkloadSpec("rag"), 1), (WorkloadSpec("chat"), 2)], seed=4)
    tok = ByteTokenizer()
    cases = set()
    for i in range(30):
        a, b = w1.request(i), w2.request(i)
        assert a.body == b.body
        assert a.input_tokens == len(tok.apply_chat_template(a.body["messages"]))
        cases.add(a.case)
        if a.case == "rag":
            assert a.input_tokens == 3000 and 200 <= a.body["max_tokens"] <= 500
    assert cases == {"rag", "chat"}
    long = Workload([(WorkloadSpec("long"), 1)]).request(0)
    assert long.input_tokens >= 10000
    est = Workload([(WorkloadSpec("rag"), 1)], tokenizer="estimate").request(0)
    assert est.input_tokens_source == "estimate" and abs(est.input_tokens - 3000) < 60


def test_prefix_workload_shares_its_system_prompt_and_json_asks_for_json():
    w = Workload([(WorkloadSpec("prefix"), 1)], seed=1)
    sys_prompts = {w.request(i).body["messages"][0]["content"] for i in range(5)}
    assert len(sys_prompts) == 1
    assert w.request(0).body["messages"][1]["content"] != w.request(1).body["messages"][1]["content"]
    j = Workload([(WorkloadSpec("json"), 1)]).request(0)
    assert j.expect_json and j.body["response_format"] == {"type": "json_object"}


def test_replay_file_keeps_cases_and_timing(tmp_path):
    p = tmp_path / "log.jsonl"
    lines = [{"messages": [{"role": "user", "content": "hi"}], "timestamp": 100.0, "case": "greeting"},
             {"prompt": "", "timestamp": 101.5},
             {"messages": [{"role": "user", "content": "x" * 50}], "max_tokens": 3, "timestamp": 103.0}]
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    w = Workload([(WorkloadSpec("replay", replay_file=str(p)), 1)])
    reqs = [w.request(i) for i in range(4)]
    assert [r.case for r in reqs[:3]] == ["greeting", "replay", "replay"]
    assert [r.offset_s for r in reqs[:3]] == [0.0, 1.5, 3.0]
    assert reqs[3].offset_s == 4.0  # the second pass continues after the first
    assert reqs[1].endpoint == "completion" and reqs[1].body["prompt"] == ""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        load_replay(str(bad))


def test_mix_and_spec_errors():
    assert parse_mix("chat=3, rag=1") == [("chat", 3.0), ("rag", 1.0)]
    with pytest.raises(ValueError, match="unknown workload"):
        WorkloadSpec("poetry")
    with pytest.raises(ValueError, match="range"):
        WorkloadSpec("chat", input_tokens="many")


def test_plans():
    p = steps([10, 50, 100], 30)
    assert p.duration == 90 and p.users_at(45) == (50, 50.0, "users=50") and p.users_at(95) is None
    r = ramp(0 + 1, 41, 40)
    assert r.users_at(0)[0] == 1 and r.users_at(20)[0] == 21 and r.users_at(39.9)[0] == 41
    assert fixed(8, 10).stage_at(3)[1].users == 8
    with pytest.raises(ValueError):
        fixed(0, 10)


def test_plan_from_a_load_description():
    # The one builder behind an experiment's load: section and `chaos load`'s options.
    assert plan_from({}).stages[0].users == 10 and plan_from({}).duration == 60
    p = plan_from({"steps": [10, 50], "step_duration": "20s", "max_requests": 7, "stop_timeout": "3s"})
    assert (p.kind, p.duration, p.max_requests, p.stop_timeout) == ("steps", 40, 7, 3)
    r = plan_from({"ramp": "2:10", "duration": "8s"})
    assert r.kind == "ramp" and r.users_at(0)[0] == 2 and r.users_at(7.99)[0] == 10
    one = plan_from({"rate": 5, "duration": "12s"})
    assert one.kind == "rate" and one.duration == 12 and one.stages[0].rate == 5
    several = plan_from({"rate": [1, 2, 3], "step_duration": "4s", "poisson": True})
    assert several.duration == 12 and [s.rate for s in several.stages] == [1, 2, 3] and several.stages[0].poisson
    assert plan_from({"replay_speed": 4, "duration": "9s"}).replay_speed == 4
    with pytest.raises(ValueError, match="choose one load shape, not users and rate"):
        plan_from({"users": 3, "rate": 2})
    with pytest.raises(ValueError, match="START:END"):
        plan_from({"ramp": "ten"})


@pytest.mark.parametrize("poisson", [False, True])
def test_arrival_schedules_split_across_processes_keep_the_rate(poisson):
    plan = arrival_rate([20, 40], 10, poisson=poisson)
    times = []
    for idx in range(3):
        s = ArrivalSchedule(plan, 1000.0, share=3, index=idx, seed=7)
        while (t := s.next()) is not None:
            times.append(t)
    first = [t for t in times if t < 1010]
    second = [t for t in times if t >= 1010]
    assert all(1000 <= t < 1020 for t in times)
    tol = 0.25 if poisson else 0.02
    assert abs(len(first) - 200) <= 200 * tol and abs(len(second) - 400) <= 400 * tol
    if not poisson:
        gaps = [b - a for a, b in zip(sorted(first), sorted(first)[1:])]
        assert max(gaps) - min(gaps) < 1e-6  # evenly spaced, even across three processes


def rec(i, outcome="ok", t0=0.0, ttft=0.1, e2e=1.0, tokens=11, lag=0.0):
    return RequestRecord(id=str(i), case="chat", endpoint="chat", stream=True, t_sched=t0, t_start=t0 + lag,
                         t_first=t0 + lag + ttft, t_end=t0 + lag + e2e, outcome=outcome, output_tokens=tokens)


def test_summary_percentiles_errors_throughput_and_lag():
    rng = random.Random(1)
    rs = [rec(i, t0=i * 0.1, e2e=1.0 + rng.random(), lag=0.05 if i < 5 else 0.0) for i in range(100)]
    rs += [rec(100 + i, outcome="timeout") for i in range(3)] + [rec(200, outcome="cancelled")]
    s = summarize(rs, "step", open_loop=True, duration_s=10.0)
    assert s.requests == 104 and s.ok == 100 and s.cancelled == 1
    assert s.errors == {"timeout": 3} and s.error_rate == pytest.approx(3 / 103)
    assert s.e2e["p50"] < s.e2e["p95"] < s.e2e["p99"] <= 2.05 + 0.05
    assert s.jitter == pytest.approx(s.e2e["p99"] / s.e2e["p50"])
    assert s.tpot["p50"] == pytest.approx((s.e2e["p50"] - 0.1) / 10, rel=0.2)
    assert s.rps == pytest.approx(10.0) and s.output_tps == pytest.approx(110.0)
    assert s.late_requests == 5 and s.max_lag_s == pytest.approx(0.05)


# -- issue 19: one monotonic clock, raw gaps, fixed output length, input_tokens as the server counts ------------

def _content_lines(n):
    return [f'data: {{"choices":[{{"delta":{{"content":"t{i}"}}}}]}}\n'.encode() for i in range(n)] + [b"data: [DONE]\n"]


def _sse_loaded_now(monkeypatch):
    """A private copy of chaos.load.sse, executed now: read_stream's default clock is bound when its module runs,
    so only a copy loaded after time.time is patched would see a default of time.time stepping."""
    import importlib.util
    import sys

    from chaos.load import sse

    spec = importlib.util.spec_from_file_location("_sse_fresh", sse.__file__)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_sse_fresh", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_a_wall_clock_step_mid_stream_is_no_inter_token_gap(monkeypatch):
    import time

    from chaos.load.clock import Clock
    from chaos.load.judge import fill_timing

    real_time = time.time
    stepped = {"by": 0.0}
    monkeypatch.setattr(time, "time", lambda: real_time() + stepped["by"])
    sse = _sse_loaded_now(monkeypatch)

    def stream(step_after):
        lines = _content_lines(8)

        def readline():
            if len(lines) == 8 - step_after:
                stepped["by"] = 17.0  # NTP steps the wall clock
            return lines.pop(0) if lines else b""
        return readline

    clock = Clock()
    r = rec(0, t0=clock.now())
    r.t_start = clock.now()
    timing = sse.read_stream(stream(4), sse.StreamState(), sse.StreamTiming())  # the clock the user gets
    r.t_end = clock.now()
    fill_timing(r, timing, clock)
    assert len(r.itl_us) == 7 and max(r.itl_us) < 1_000_000 and r.max_itl < 1.0
    assert 0 <= r.ttft < 1.0 and 0 <= r.e2e < 1.0 and r.t_start <= r.t_first <= r.t_end
    assert abs(clock.now() - real_time()) < 1.0  # the record's Unix times stay on the anchor's timeline
    # The same stream timed on the wall clock, as the user timed it before: the step shows as a 17 s gap.
    stepped["by"] = 0.0
    wall = sse.read_stream(stream(4), sse.StreamState(), sse.StreamTiming(), mono=time.time)
    assert wall.max_gap > 16


def test_read_stream_keeps_every_gap_up_to_its_bound_and_counts_the_rest():
    from chaos.load.sse import StreamTiming, read_stream

    lines = _content_lines(12)
    ticks = iter(range(100))
    t = read_stream(lambda: lines.pop(0) if lines else b"", StreamState(), StreamTiming(),
                    mono=lambda: next(ticks) * 0.002, max_gaps=5)
    assert t.gaps_us == [2000] * 5 and t.dropped == 6 and t.max_gap == pytest.approx(0.002)


def test_summary_pools_itl_beside_tpot_and_counts_early_ends():
    import numpy as np

    rs = []
    for i in range(20):
        r = rec(i, t0=i, ttft=0.1, e2e=0.1 + 0.01 * 9, tokens=10)
        r.itl_us = [1000 * (1 + (i + k) % 7) for k in range(9)]
        r.requested_tokens = 10
        r.finish_reason = "length"
        rs.append(r)
    for r in rs:
        r.fixed_output = True
    short = rec(99, t0=5, tokens=4)
    short.requested_tokens, short.finish_reason, short.itl_us, short.fixed_output = 10, "stop", [50_000] * 3, True
    rs.append(short)
    s = summarize(rs, "step")
    pooled = [g for r in rs for g in r.itl_us]
    assert s.itl_gaps == len(pooled) == 183
    for q in (50, 95, 99):
        assert s.itl[f"p{q}"] == pytest.approx(float(np.percentile(pooled, q)) / 1e6)
    tpots = [(r.t_end - r.t_first) / (r.output_tokens - 1) for r in rs]
    assert s.tpot["p50"] == pytest.approx(float(np.percentile(tpots, 50)))
    assert s.ended_early == 1 and short.ended_early and not rs[0].ended_early
    assert "ended early: 1 of 21 fixed-length" in format_table([s])
    assert "ITL p50/p95/p99 ms" in format_table([s])


def test_fixed_output_lengths_ask_the_server_to_ignore_eos():
    fixed_len = Workload([(WorkloadSpec("chat", output_tokens=64), 1)]).request(0)
    assert fixed_len.body["max_tokens"] == 64 and fixed_len.body["ignore_eos"] is True and fixed_len.fixed_output
    off = Workload([(WorkloadSpec("chat", output_tokens=64), 1)], ignore_eos=False).request(0)
    assert "ignore_eos" not in off.body
    j = Workload([(WorkloadSpec("json"), 1)]).request(0)  # a JSON object must be allowed to end
    assert "ignore_eos" not in j.body and not j.fixed_output


def test_input_tokens_count_the_whole_prompt_and_sizes_below_a_case_are_refused():
    tok = ByteTokenizer()
    for n in (2, 21, 64, 333):
        c = Workload([(WorkloadSpec("completion", input_tokens=n), 1)], seed=n).request(0)
        assert c.endpoint == "completion" and len(tok.encode(c.body["prompt"])) == n == c.input_tokens
    for case in ("chat", "rag", "long", "json", "prefix"):
        w = Workload([(WorkloadSpec(case, input_tokens=2000), 1)], seed=3)
        for i in range(10):
            assert len(tok.apply_chat_template(w.request(i).body["messages"])) == 2000
        floor = w.floor(case)
        assert len(tok.apply_chat_template(Workload([(WorkloadSpec(case, input_tokens=floor), 1)])
                                           .request(0).body["messages"])) == floor
        with pytest.raises(ValueError, match=f"ask for at least {floor}"):
            Workload([(WorkloadSpec(case, input_tokens=f"{floor - 1}-{floor + 50}"), 1)])
    est = Workload([(WorkloadSpec("completion", input_tokens=100), 1)], tokenizer="estimate").request(0)
    assert est.input_tokens_source == "estimate"  # other servers' tokenizers are unknown: an estimate, said so


def test_the_loads_byte_tokenizer_counts_what_the_reference_server_counts():
    """The load keeps its own byte-level counting (the server stands alone): the two must agree on every prompt,
    multi-byte text, empty content and any role included; the estimate is said to be one."""
    from chaos.load.tokens import TokenCounter

    tok, mine = ByteTokenizer(), TokenCounter("byte")
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": ""}],
             [{"role": "system", "content": "Réponds en français ✓"}, {"role": "user", "content": "数据 🚀\n\tx"},
              {"role": "assistant", "content": "ok"}, {"role": "tool", "content": "{\"a\": 1}"}]]
    for messages in chats:
        assert mine.count_chat(messages) == len(tok.apply_chat_template(messages))
    for prompt in ("", "a", "naïve café 🚀" * 50):
        assert mine.count_prompt(prompt) == len(tok.encode(prompt))
    assert (mine.kind, mine.source) == ("byte", "exact")
    est = TokenCounter("estimate")
    assert est.source == "estimate" and est.count_text("x" * 400) == 100
    with pytest.raises(ValueError, match="'byte' or 'estimate'"):
        TokenCounter("tiktoken")


def test_no_ignore_eos_flag_and_the_experiment_switch_reach_the_load_config():
    import argparse

    from chaos.plan.loadcli import build_config, register
    from chaos.experiment.loadspec import LoadSpec, load_config

    p = argparse.ArgumentParser()
    register(p.add_subparsers(), argparse.HelpFormatter)
    on = build_config(p.parse_args(["load", "http://127.0.0.1:9", "--output-tokens", "64"]))
    off = build_config(p.parse_args(["load", "http://127.0.0.1:9", "--output-tokens", "64", "--no-ignore-eos"]))
    assert on.ignore_eos is True and off.ignore_eos is False
    cfg = load_config(LoadSpec(workload="chat", users=2, duration="5s"), ["http://127.0.0.1:9"], None, None, "/tmp/x",
                      ignore_eos=False)
    assert cfg.ignore_eos is False


# -- review of issue 19: malformed chunk shapes, what the summary counts, records in 4 bytes a gap ---------------

ODD_CHUNKS = [  # each once raised AttributeError or TypeError in the parser
    {"choices": ["x"]}, {"choices": [{"delta": "x"}]}, {"choices": {"delta": {}}}, {"choices": "x"},
    {"choices": [], "usage": [1, 2]}, {"choices": [], "usage": "many"}, {"choices": [{"delta": {"content": 5}}]},
    {"choices": [{"text": ["a"]}]}, {"choices": [{"delta": {"content": "a"}, "finish_reason": ["stop"]}]},
]


@pytest.mark.parametrize("chunk", ODD_CHUNKS, ids=lambda c: json.dumps(c))
def test_chunks_of_the_wrong_shape_are_malformed_not_a_crash(chunk):
    from chaos.load.judge import judge_stream
    from chaos.load.workloads import LLMRequest

    s = StreamState()
    s.feed('data: {"choices":[{"delta":{"content":"ok"}}]}')
    assert s.feed("data: " + json.dumps(chunk)) == ""
    s.feed("data: [DONE]")
    assert s.malformed and "malformed chunk" in s.malformed
    r = rec(0)
    judge_stream(s, r, LLMRequest("chat", "chat", {}, 10, "exact"))
    assert (r.outcome, r.error_code) == ("stream_error", "malformed_chunk")


@pytest.mark.parametrize("body", [
    {"choices": [{"message": {"content": 5}}]}, {"choices": [{"message": "x"}]}, {"choices": ["x"]},
    {"choices": [{"message": {"content": "{}"}, "finish_reason": 1}]}, {"choices": {"0": {}}},
])
def test_plain_bodies_of_the_wrong_shape_are_malformed(body):
    from chaos.load.judge import judge_plain
    from chaos.load.workloads import LLMRequest

    r = rec(0)
    judge_plain(json.dumps(body).encode(), r, LLMRequest("json", "chat", {}, 10, "exact", expect_json=True))
    assert (r.outcome, r.error_code) == ("stream_error", "malformed_body")
    ok = rec(1)  # a usage of the wrong shape is no count, not a crash
    judge_plain(b'{"choices":[{"message":{"content":"{}"}}],"usage":[3]}', ok, LLMRequest("json", "chat", {}, 10,
                                                                                        "exact", expect_json=True))
    assert ok.outcome == "ok" and ok.server_input_tokens is None


def test_only_exact_counts_mismatch_and_only_fixed_lengths_end_early():
    rs = []
    cases = [("exact", True), ("estimate", True), ("exact", False), ("estimate", False)]
    for i, (source, is_fixed) in enumerate(cases):
        r = rec(i, tokens=3)
        r.input_tokens, r.server_input_tokens, r.input_tokens_source = 100, 97, source
        r.requested_tokens, r.finish_reason, r.fixed_output = 10, "stop", is_fixed  # false: json or replay, a cap
        rs.append(r)
    s = summarize(rs, "step")
    assert s.input_mismatch == 2 and s.ended_early == 2 and s.fixed_output == 2
    assert [r.ended_early for r in rs] == [True, True, False, False]
    assert "ended early: 2 of 2 fixed-length ok requests" in format_table([s])


def test_records_read_back_keep_gaps_in_four_bytes(tmp_path):
    from array import array

    from chaos.records import read_new_records, read_records

    a, b = rec(0), rec(1)
    a.itl_us, b.itl_us = [7, 3_000_000_000, 5], [2 ** 33]  # one fits in 32 bits, one does not
    p = tmp_path / "requests.jsonl"
    p.write_text(a.to_json() + "\n" + b.to_json() + "\n" + a.to_json()[:40])  # the last line still being written
    got, offset = read_new_records(str(p))
    assert [r.itl_us for r in got] == [array("I", [7, 3_000_000_000, 5]), array("q", [2 ** 33])]
    assert offset == len(a.to_json()) + len(b.to_json()) + 2
    assert json.loads(got[0].to_json())["itl_us"] == [7, 3_000_000_000, 5]  # arrays write back as lists
    s = summarize(read_records(str(p)) + [a], "step")  # arrays and lists pool together
    assert s.itl_gaps == 7 and s.itl["p50"] == pytest.approx(7e-6)  # of 5 5 7 7 3e9 3e9 2**33


def _live_run(tmp_path):
    """A LoadRun that reads a file the test writes, and the run's clock it was given (Locust's, in a run)."""
    from chaos.load.clock import Clock
    from chaos.load.driver import LoadConfig, LoadRun

    cfg = LoadConfig(target="http://127.0.0.1:9", plan=fixed(2, 3600), workload=[(WorkloadSpec("chat"), 1)],
                     out_dir=str(tmp_path))
    clock = Clock()
    return LoadRun(cfg, progress=lambda _: None, clock=clock), clock


def test_live_line_keeps_only_its_window(tmp_path):
    run, clock = _live_run(tmp_path)
    now = clock.now()
    with open(run.records_path, "w") as f:
        for i in range(100):
            f.write(rec(i, t0=now - 300 + i, e2e=1.0).to_json() + "\n")  # ended minutes ago
        for i in range(5):
            f.write(rec(100 + i, t0=now - 3, e2e=1.0).to_json() + "\n")
    line = run.live_line(10.0)
    assert "total    105" in line and "last 10s:     5 done" in line
    assert len(run._tail) == 5  # it held every record of the run, re-filtered every 5 s
    with open(run.records_path, "a") as f:
        f.write(rec(200, t0=now - 2, e2e=1.0).to_json() + "\n")
    assert "total    106" in run.live_line(10.0) and len(run._tail) == 6


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_live_line_is_not_fooled_by_a_wall_clock_step(tmp_path, monkeypatch, step):
    import time

    run, clock = _live_run(tmp_path)  # anchored, as Locust's processes are, before the step
    now = clock.now()
    with open(run.records_path, "w") as f:
        for i in range(20):  # a backward step once counted these as recent
            f.write(rec(i, t0=now - 300 + i, e2e=1.0).to_json() + "\n")
        for i in range(4):  # a forward step once left these out
            f.write(rec(20 + i, t0=now - 3, e2e=1.0).to_json() + "\n")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + step)
    assert "last 10s:     4 done" in run.live_line(10.0)


def test_the_clock_travels_to_locust_exactly_and_a_bad_anchor_falls_back():
    from chaos.load.clock import ENV, Clock

    c = Clock()
    same = Clock.from_env({ENV: c.to_env()})
    assert (same.wall0, same.mono0) == (c.wall0, c.mono0) and abs(same.now() - c.now()) < 0.01
    for bad in ({}, {ENV: ""}, {ENV: "1.0"}, {ENV: "x y"}):
        fresh = Clock.from_env(bad)
        assert abs(fresh.now() - __import__("time").time()) < 1.0
