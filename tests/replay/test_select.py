"""select: status, error code, failure and size filters over a real parsed log."""

import json

import pytest

from chaos.replay import Item, Problem, item_tokens, iter_log, select


@pytest.fixture
def log(tmp_path):
    rows = [
        {"request": {"prompt": "a" * 9}, "response": {"status": 200}},
        {"request": {"prompt": "b" * 99}, "response": {"status": 400, "body": {"error": {
            "code": "context_length_exceeded"}}}},
        "{broken",
        {"request": {"messages": [{"role": "user", "content": "c"}]}, "response": {"status": 429,
                                                                                   "error_code": "rate_limited"}},
        {"prompt": "no envelope, no status"},
        {"request": {"prompt": "e"}, "response": {"status": 503}},
    ]
    p = tmp_path / "log.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def lines(got):
    return [g.line_no for g in got if isinstance(g, Item)]


def test_status_filters(log):
    assert lines(select(iter_log(log), status=400)) == [2]
    assert lines(select(iter_log(log), status="4xx")) == [2, 4]
    assert lines(select(iter_log(log), status=[200, "5xx"])) == [1, 6]
    assert lines(select(iter_log(log), error_code="rate_limited")) == [4]
    assert lines(select(iter_log(log), error_code=["context_length_exceeded", "rate_limited"])) == [2, 4]
    assert lines(select(iter_log(log), failed=False)) == [1, 5]


def test_size_filters_use_the_reference_count(log):
    sizes = {i.line_no: item_tokens(i) for i in iter_log(log) if isinstance(i, Item)}
    assert sizes == {1: 10, 2: 100, 4: 1 + (4 + 1 + 4) + 1 + 10, 5: 23, 6: 2}
    assert lines(select(iter_log(log), min_tokens=10, max_tokens=23)) == [1, 4, 5]
    assert lines(select(iter_log(log), min_tokens=50)) == [2]


def test_problems_pass_through_unless_dropped(log):
    got = list(select(iter_log(log), status=200))
    assert [type(g).__name__ for g in got] == ["Item", "Problem"] and got[1].line_no == 3
    assert not any(isinstance(g, Problem) for g in select(iter_log(log), status=200, keep_problems=False))


def test_bad_filters_say_so(log):
    with pytest.raises(ValueError, match="4xx"):
        list(select(iter_log(log), status="client-error"))
    with pytest.raises(ValueError, match="nothing would pass"):
        list(select(iter_log(log), min_tokens=10, max_tokens=5))
