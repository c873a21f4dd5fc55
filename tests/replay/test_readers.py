"""iter_log on JSON-line logs with text: OpenAI bodies, envelopes, mapped logs; broken lines; sniffing."""

import gzip
import json

import pytest

from chaos.replay import Item, Problem, Scrubber, detect_format, iter_log


def write(path, lines):
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def split(got):
    items = [g for g in got if isinstance(g, Item)]
    problems = [g for g in got if isinstance(g, Problem)]
    return items, problems


def test_openai_bodies_chat_and_completion_with_broken_lines(tmp_path):
    p = write(tmp_path / "log.jsonl", [
        {"timestamp": 1700000000.25, "model": "m", "messages": [{"role": "user", "content": "hi"}],
         "max_tokens": 8, "case": "greeting"},
        "",
        '{"prompt": "broken',
        {"timestamp": 1700000002.75, "prompt": "once upon", "max_tokens": 4},
        "[1, 2]",
        {"temperature": 0.5},
        {"prompt": "no time"},
        {"timestamp": "not a time", "prompt": "x"},
    ])
    assert detect_format(p) == "jsonl"
    items, problems = split(list(iter_log(p)))
    assert [(i.line_no, i.endpoint) for i in items] == [(1, "chat"), (4, "completion"), (7, "completion")]
    assert [i.offset_s for i in items] == [0.0, 2.5, None]
    assert items[0].body == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    assert items[0].case == "greeting" and items[0].fmt == "openai"
    assert [p.line_no for p in problems] == [3, 5, 6, 8]
    assert "not JSON" in problems[0].why and "messages" in problems[2].why and "time" in problems[3].why
    assert str(problems[0]).startswith("line 3: ")


def test_iso_timestamps_without_zone_are_utc(tmp_path):
    p = write(tmp_path / "log.jsonl", [
        {"timestamp": "2024-03-01T12:00:00", "prompt": "a"},
        {"timestamp": "2024-03-01 12:00:01.5", "prompt": "b"},
        {"timestamp": "2024-03-01T13:00:02+01:00", "prompt": "c"},  # 12:00:02 UTC
        {"timestamp": "2024-03-01T12:00:03.25Z", "prompt": "d"},
    ])
    assert [i.offset_s for i in iter_log(p)] == [0.0, 1.5, 2.0, 3.25]


def test_envelopes_keep_status_error_code_usage_and_headers(tmp_path):
    p = write(tmp_path / "env.jsonl", [
        {"timestamp": 100, "request": {"model": "m", "prompt": "p1", "max_tokens": 3},
         "response": {"status": 200, "body": {"usage": {"prompt_tokens": 3, "completion_tokens": 3}}}},
        {"timestamp": 101.5, "request": {"url": "/v1/chat/completions", "headers": {"Authorization": "Bearer x"},
                                         "body": {"messages": [{"role": "user", "content": "long"}]}},
         "response": {"status_code": 400, "body": {"error": {"code": "context_length_exceeded",
                                                             "type": "invalid_request_error"}}}},
        {"timestamp": 102, "request": {"body": json.dumps({"prompt": "as a string"})},
         "response": {"status": 503, "error": {"type": "overloaded"}}},
        {"timestamp": 103, "request": {"body": {"max_tokens": 3}}},
        {"timestamp": 104, "request": "not an object"},
    ])
    items, problems = split(list(iter_log(p)))
    assert [(i.line_no, i.endpoint, i.status, i.error_code, i.failed) for i in items] == [
        (1, "completion", 200, None, False), (2, "chat", 400, "context_length_exceeded", True),
        (3, "completion", 503, "overloaded", True)]
    assert [i.offset_s for i in items] == [0.0, 1.5, 2.0]
    assert (items[0].input_tokens, items[0].output_tokens) == (3, 3)
    assert items[1].headers == {"Authorization": "Bearer x"}
    assert items[1].body == {"messages": [{"role": "user", "content": "long"}]}
    assert items[2].body == {"prompt": "as a string"}
    assert [p.line_no for p in problems] == [4, 5]
    # An explicit fmt refuses lines of the other shape instead of guessing.
    _, env_problems = split(list(iter_log(write(tmp_path / "b.jsonl", [{"prompt": "x"}]), fmt="envelope")))
    assert [p.line_no for p in env_problems] == [1]


def test_mapping_with_dotted_paths_and_units(tmp_path):
    mapping = {"time": "ts", "time_unit": "ms", "prompt": "input.text", "max_tokens": "params.max_new_tokens",
               "status": "result.http", "error_code": "result.err", "input_tokens": "stats.0"}
    p = write(tmp_path / "custom.log", [
        {"ts": 1700000000000, "input": {"text": "hello"}, "params": {"max_new_tokens": 7},
         "result": {"http": 200}, "stats": [5]},
        {"ts": 1700000000250, "input": {"text": "again"}, "result": {"http": 429, "err": "rate_limited"}},
        {"ts": 1700000001000, "input": {}},
        {"ts": "soon", "input": {"text": "x"}},
    ])
    assert detect_format(p, mapping) == "mapped"
    items, problems = split(list(iter_log(p, mapping=mapping)))
    assert [(i.line_no, i.offset_s) for i in items] == [(1, 0.0), (2, 0.25)]
    assert items[0].body == {"prompt": "hello", "max_tokens": 7} and items[0].input_tokens == 5
    assert (items[1].status, items[1].error_code, items[1].failed) == (429, "rate_limited", True)
    assert [p.line_no for p in problems] == [3, 4]
    assert "input.text" in problems[0].why

    iso = write(tmp_path / "iso.jsonl", [{"at": {"t": "2024-01-01 00:00:00"}, "chat": [
        {"role": "user", "content": "q"}]}, {"at": {"t": "2024-01-01 00:01:00.5"}, "chat": [
            {"role": "user", "content": "r"}]}])
    got = list(iter_log(iso, mapping={"time": "at.t", "time_unit": "iso", "messages": "chat"}))
    assert [(i.endpoint, i.offset_s) for i in got] == [("chat", 0.0), ("chat", 60.5)]
    secs = write(tmp_path / "s.jsonl", [{"t": 10, "q": "a"}, {"t": 12.5, "q": "b"}])
    assert [i.offset_s for i in iter_log(secs, mapping={"time": "t", "time_unit": "s", "prompt": "q"})] == [
        0.0, 2.5]


def test_mapping_is_validated():
    with pytest.raises(ValueError, match="unknown mapping keys"):
        list(iter_log("/nonexistent", mapping={"prompt": "a", "tokens": "b"}))
    with pytest.raises(ValueError, match="time_unit"):
        list(iter_log("/nonexistent", mapping={"prompt": "a", "time_unit": "h"}))
    with pytest.raises(ValueError, match="needs 'prompt'"):
        list(iter_log("/nonexistent", mapping={"time": "t"}))
    with pytest.raises(ValueError, match="fmt must be"):
        list(iter_log("/nonexistent", fmt="yaml"))


def test_gzip_and_overlong_lines(tmp_path):
    p = tmp_path / "log.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps({"prompt": "a"}) + "\n" + json.dumps({"prompt": "b" * 5000}) + "\n"
                + json.dumps({"prompt": "c"}) + "\n")
    items, problems = split(list(iter_log(p, max_line_bytes=1000)))
    assert [(i.line_no, i.body["prompt"]) for i in items] == [(1, "a"), (3, "c")]
    assert [(p.line_no, "longer than 1000 bytes" in p.why) for p in problems] == [(2, True)]


def test_invalid_utf8_is_a_problem_that_quotes_nothing(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_bytes(b'{"prompt": "ok"}\n{"prompt": "secret\xff\xfe"}\n{"prompt": "fine"}\n')
    items, problems = split(list(iter_log(p)))
    assert [i.line_no for i in items] == [1, 3]
    assert problems[0].line_no == 2 and "secret" not in problems[0].why


def test_scrubber_applied_by_the_reader(tmp_path):
    p = write(tmp_path / "env.jsonl", [
        {"request": {"headers": {"X-Api-Key": "k-123456"}, "body": {"prompt": "mail me at ann@example.com"}}}])
    s = Scrubber()
    [item] = iter_log(p, scrubber=s)
    assert item.body == {"prompt": "mail me at [email]"} and item.headers == {"X-Api-Key": "[api_key]"}
    assert s.report() == {"api_key": 1, "email": 1, "total": 2}


def test_unknown_formats_say_what_to_do(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ValueError, match="pass fmt="):
        detect_format(p)
    q = tmp_path / "x.txt"
    q.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match="pass fmt="):
        list(iter_log(q))


def test_with_a_scrubber_lines_are_read_a_batch_at_a_time_and_yielded_in_file_order(tmp_path):
    from chaos.replay.readers import SCRUB_BATCH, SCRUB_BATCH_BYTES

    rows = [b"{not json" if n % 10 == 7 else json.dumps({"prompt": f"line {n} mail u{n}@example.com"}).encode()
            for n in range(1, 151)]
    p = tmp_path / "log.jsonl"
    p.write_bytes(b"\n".join(rows) + b"\n")
    s, plain = Scrubber(), Scrubber()
    scrubbed = list(iter_log(p, scrubber=s))
    expect = list(iter_log(p))
    for it in expect:
        if isinstance(it, Item):
            plain.scrub_item(it)
    assert [(type(x), x.line_no) for x in scrubbed] == [(type(x), x.line_no) for x in expect]  # Problems in place
    assert [x.body for x in scrubbed if isinstance(x, Item)] == [x.body for x in expect if isinstance(x, Item)]
    assert s.report() == plain.report() == {"email": 135, "total": 135}
    # prepare sees a whole batch before the first is handed on: SCRUB_BATCH lines, or fewer long ones
    seen = []
    first = next(iter(iter_log(p, prepare=lambda it: seen.append(it.line_no) or it.line_no)))
    assert first == 1 and len(seen) == SCRUB_BATCH - SCRUB_BATCH // 10  # the batch's Problems count in it
    big = tmp_path / "big.jsonl"
    size = SCRUB_BATCH_BYTES // 3 + 1
    big.write_bytes(b"".join(json.dumps({"prompt": "x" * size}).encode() + b"\n" for _ in range(10)))
    seen.clear()
    assert next(iter(iter_log(big, prepare=lambda it: seen.append(it.line_no) or it))).line_no == 1
    assert seen == [1, 2, 3]  # memory: a batch ends once its lines pass SCRUB_BATCH_BYTES

    def deep(it):
        if it.line_no == 3:
            raise RecursionError
        return it.line_no

    got = list(iter_log(p, prepare=deep))
    assert got[:3] == [1, 2, got[2]] and isinstance(got[2], Problem) and "nested too deeply" in got[2].why


def test_a_batch_counts_the_prompts_made_for_a_trace(tmp_path):
    """A trace's lines are short and the prompts made for them may be MBs (up to 16 Mi tokens): they count."""
    from chaos.replay.readers import SCRUB_BATCH_BYTES

    rows = [b"2023-11-16 18:15:%02d.6805900,600000,5" % n for n in range(10)]  # ~600k characters of prompt each
    p = tmp_path / "trace.csv"
    p.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + b"\n".join(rows) + b"\n")
    seen = []
    first = next(iter(iter_log(p, prepare=lambda it: seen.append(len(it.body["prompt"])) or it)))
    assert first.line_no == 2 and seen[0] > SCRUB_BATCH_BYTES // 4  # a prompt far longer than its line
    assert sum(seen[:-1]) < SCRUB_BATCH_BYTES <= sum(seen) and len(seen) < 10  # the batch ended on the prompts
