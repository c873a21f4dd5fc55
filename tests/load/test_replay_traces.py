"""Production traces without text, replayed as they arrived: an Azure LLM inference CSV and a Mooncake JSONL go
through chaos.replay (prompts synthesised to the trace's lengths, a shared hash id a shared prefix) into the same
timed replay that sends every request once, in order. Real Locust against a real reference server on loopback."""

import json

import pytest

from chaos.load.driver import LoadConfig, run_load
from chaos.load.shapes import replay
from chaos.load.replay.log import iter_replay, scan_replay
from chaos.load.workloads import WorkloadSpec


def azure_csv(path, n=24, span_s=3.0):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        t = 16.5 + span_s * i / n  # seconds past 18:17, with the trace's 7 fractional digits
        rows.append(f"2023-11-16 18:17:{t:010.7f},{40 + 10 * (i % 5)},{2 + i % 3}")
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def reference():
    from chaos.reference.launcher import start_server

    with start_server(["--preset", "tiny", "--replica-id", "T0"]) as s:
        yield s


def test_an_azure_trace_is_scanned_and_streamed_in_time_order(tmp_path):
    log = tmp_path / "azure.csv"
    azure_csv(log)
    scan = scan_replay(str(log))
    assert (scan.requests, scan.timed) == (24, True)
    items = list(iter_replay(str(log)))
    assert [i.error for i in items] == [None] * 24
    offsets = [i.offset_s for i in items]
    assert offsets == sorted(offsets) and abs(offsets[-1] - 3.0 * 23 / 24) < 1e-6  # the 7-digit fraction kept
    assert all(i.entry["max_tokens"] == 2 + k % 3 for k, i in enumerate(items))


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_an_azure_trace_replays_whole_against_the_reference_server(tmp_path, reference):
    log = tmp_path / "azure.csv"
    azure_csv(log)
    plan = replay(20.0, speed=2.0, max_users=32, max_requests=24, stop_timeout=2.0)
    cfg = LoadConfig(target=reference.base_url, plan=plan, out_dir=str(tmp_path / "o"),
                     workload=[(WorkloadSpec("replay", replay_file=str(log)), 1.0)])
    result = run_load(cfg, progress=lambda line: None)
    assert (result.replay["window"], result.replay["sent"], result.replay["not_sent"]) == (24, 24, 0)
    records = [json.loads(line) for line in open(result.records_path)]
    assert len(records) == 24 and all(r["outcome"] == "ok" for r in records)
    # the synthesised prompts are exactly the trace's ContextTokens as the server counts them
    by_line = {r["source_line"]: r for r in records}
    for line, r in by_line.items():
        assert r["server_input_tokens"] == 40 + 10 * ((line - 2) % 5), r


def test_a_mooncake_trace_shares_prefixes_where_its_hash_ids_do(tmp_path):
    log = tmp_path / "mooncake.jsonl"
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [7, 8, 9]},
            {"timestamp": 250, "input_length": 1100, "output_length": 4, "hash_ids": [7, 8, 10]},
            {"timestamp": 500, "input_length": 600, "output_length": 4, "hash_ids": [11, 12]}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    a, b, c = (i.entry["prompt"] for i in iter_replay(str(log)))
    assert a[:1000] == b[:1000] and a != b  # blocks 7 and 8 shared, the third not
    assert a[:200] != c[:200]


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_trace_requests_ask_for_the_traces_output_length_and_a_failed_burstgpt_row_one_token(tmp_path, reference):
    log = tmp_path / "burst.csv"
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    outs = [5, 0, 9, 3, 0, 7]  # 0: a request BurstGPT logged as failed
    rows += [f"{0.1 * i:.1f},ChatGPT,{30 + i},{o},{30 + i + o},Conversation log" for i, o in enumerate(outs)]
    log.write_text("\n".join(rows) + "\n")
    plan = replay(20.0, speed=2.0, max_users=8, stop_timeout=2.0)
    cfg = LoadConfig(target=reference.base_url, plan=plan, out_dir=str(tmp_path / "o"), stream=False,
                     workload=[(WorkloadSpec("replay", replay_file=str(log)), 1.0)])
    result = run_load(cfg, progress=lambda line: None)
    assert result.replay["not_sent"] == 0
    by_line = {r["source_line"]: r for r in map(json.loads, open(result.records_path))}
    assert sorted(by_line) == list(range(2, 2 + len(outs)))
    for k, want in enumerate(outs):
        r = by_line[2 + k]
        assert r["outcome"] == "ok", r
        if want:  # fixed length: exactly the trace's tokens, the model's EOS ignored
            assert (r["fixed_output"], r["ignore_eos"], r["requested_tokens"]) == (True, True, want)
            assert r["output_tokens"] == want
        else:  # unknown length: a one-token cap, not a fixed length the summary would judge
            assert (r["fixed_output"], r["ignore_eos"], r["requested_tokens"]) == (False, False, 1)
            assert r["output_tokens"] <= 1
    # with the target's ignore_eos off, the length is still asked for but EOS may end it
    cfg.ignore_eos, cfg.out_dir = False, str(tmp_path / "o2")
    result = run_load(cfg, progress=lambda line: None)
    recs = list(map(json.loads, open(result.records_path)))
    assert {r["ignore_eos"] for r in recs} == {False}
    assert {r["fixed_output"] for r in recs if r["requested_tokens"] > 1} == {True}
