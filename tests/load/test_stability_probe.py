"""The output measures the load user writes on each record (chaos.load.outputs) and the stability probe workload
(chaos.load.stability): what counts as a loop and as damage, what is kept of an answer, and how probes mix in."""

import random

import pytest

from chaos.load.outputs import describe_output, garbled, loop_share, output_sha
from chaos.load.stability import probe, with_stability
from chaos.load.workloads import LLMRequest, TokenCounter, Workload, WorkloadSpec
from chaos.records import RequestRecord


@pytest.mark.parametrize("text,share", [
    ("", 0.0), ("ab", 0.0), ("aaa", 1.0), ("abcabcabc", 1.0),
    ("Hello world. " + "the cat " * 10, 81 / 93),  # the loop, and the space before it (the unit rotated)
    ("xyz" + "abcd" * 5 + "ab", 22 / 25),  # max_tokens cut the last unit short: still the loop
    ("abcdabcd", 0.0),  # a unit twice is not a loop
    ("aaab", 0.0),  # a repetition that stopped before the end is not a closing loop
    ("x" * 5 + "y" * 65 * 3, 195 / 200),
])
def test_loop_share(text, share):
    assert loop_share(text) == pytest.approx(share, abs=1e-4)


def test_a_unit_longer_than_64_characters_is_not_looked_for():
    unit = "".join(chr(65 + i % 26) + chr(97 + i % 7) for i in range(40))  # 80 characters, no shorter period
    assert loop_share(unit * 3) == 0.0


def test_prose_is_not_a_loop():
    rng = random.Random(3)
    words = "latency replica gateway cache token stream request server model batch queue".split()
    text = " ".join(rng.choice(words) for _ in range(200))
    assert loop_share(text) < 0.05


def test_garbled_counts_damage_only():
    assert garbled("plain text,\ttabs\nand CR\r, accents é 中文 emoji 🙂") == 0
    assert garbled("bad \ufffd\ufffd") == 2
    assert garbled("nul \x00 bell \x07 esc \x1b del \x7f c1 \x85") == 5
    assert garbled("lone \ud800 surrogate, nonchar \uffff") == 2


def test_sha_is_a_short_stable_digest_that_takes_lone_surrogates():
    assert output_sha("abc") == "ba7816bf8f01cfea" and len(output_sha("\ud800")) == 16


def _rec(**kw):
    return RequestRecord(id="x", case="chat", endpoint="chat", stream=True, t_sched=0, t_start=0, **kw)


def test_describe_keeps_a_head_for_generated_requests_never_for_replayed_ones():
    r = _rec()
    describe_output(r, "x" * 200, LLMRequest("chat", "chat", {}, 10, "exact"))
    assert r.output_head == "x" * 80 and r.json_valid is None and r.repeat_ngram == 1.0 and r.garbled == 0
    replayed = _rec()
    describe_output(replayed, "secret user data", LLMRequest("replay", "chat", {}, 10, "exact", source_line=7))
    assert replayed.output_head is None and replayed.output_sha == output_sha("secret user data")


def test_describe_judges_json_where_json_was_asked_for():
    structured = LLMRequest("stability", "chat", {"response_format": {"type": "json_schema"}}, 10, "exact")
    for text, valid in (('{"answer": "x", "confidence": 1}', True), ("{,", False)):
        r = _rec()
        describe_output(r, text, structured)
        assert r.json_valid is valid and r.outcome == "ok"  # a probe's bad JSON is judged by the check, not an error
    bad = _rec(outcome="bad_output", error_code="invalid_json")  # the json workload's own parse said so
    describe_output(bad, "nope", LLMRequest("json", "chat", {}, 10, "exact", expect_json=True))
    assert bad.json_valid is False


def test_a_probe_is_the_same_request_every_time():
    spec = WorkloadSpec("stability", extra={"prompts": 4, "structured": 2, "json_schema": True})
    counter = TokenCounter("byte")
    seen = {}
    for i in range(200):
        req = Workload([(spec, 1.0)], seed=i).request(i)
        assert seen.setdefault(req.stability_key, req.body) == req.body
        assert req.body["temperature"] == 0 and "ignore_eos" not in req.body and not req.fixed_output
        assert not req.expect_json and req.input_tokens == counter.count_chat(req.body["messages"])
    assert sorted(seen) == ["s0-chat", "s1-chat", "s2-json_object", "s3-json_schema"]
    assert seen["s3-json_schema"]["response_format"]["json_schema"]["schema"]["required"] == ["answer", "confidence"]


def test_probes_mix_in_at_their_share():
    specs = with_stability([(WorkloadSpec("chat"), 3.0), (WorkloadSpec("rag"), 1.0)], {"share": "20%", "prompts": 2})
    assert [s.name for s, _ in specs] == ["chat", "rag", "stability"] and specs[2][1] == pytest.approx(1.0)
    assert specs[2][0].extra == {"prompts": 2}
    wl = Workload(specs, seed=5)
    cases = [wl.request(i).case for i in range(2000)]
    assert 0.17 < cases.count("stability") / len(cases) < 0.23
    assert {wl.request(i).stability_key for i in range(2000) if cases[i] == "stability"} == {"s0-chat", "s1-json_object"}
    only = with_stability([(WorkloadSpec("chat"), 1.0)], {"share": "100%"})
    assert [s.name for s, _ in only] == ["stability"]


def test_a_mix_that_names_the_probes_takes_the_options_and_refuses_a_second_share():
    specs = with_stability([(WorkloadSpec("chat"), 4.0), (WorkloadSpec("stability"), 1.0)], {"prompts": 3})
    assert specs[1][0].extra == {"prompts": 3} and specs[1][1] == 1.0
    with pytest.raises(ValueError, match="not both"):
        with_stability([(WorkloadSpec("stability"), 1.0)], {"share": "10%"})
    with pytest.raises(ValueError, match="structured"):
        with_stability([(WorkloadSpec("chat"), 1.0)], {"prompts": 2, "structured": 3})


def test_probe_keys_name_the_prompt_and_its_kind():
    o = {"prompts": 3, "structured": 1, "json_schema": False, "max_tokens": 8, "seed": 1}
    assert [probe(i, o)[0] for i in range(3)] == ["s0-chat", "s1-chat", "s2-json_object"]
