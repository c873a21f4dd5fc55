"""Traces without text (Azure, BurstGPT, Mooncake): parsing, and prompts synthesised to the reference
server's exact token counts with Mooncake's shared prefixes as byte-identical blocks."""

import json

import pytest

from chaos.reference.tokenizer import ByteTokenizer
from chaos.replay import BLOCK_TOKENS, Item, Problem, PromptSynth, detect_format, iter_log

TOK = ByteTokenizer()


def ref_ids(item: Item) -> list[int]:
    """The token ids the reference server builds for the item's prompt."""
    if item.endpoint == "chat":
        return TOK.apply_chat_template(item.body["messages"])
    return TOK.encode(item.body["prompt"])


def split(got):
    return [g for g in got if isinstance(g, Item)], [g for g in got if isinstance(g, Problem)]


def test_azure_csv_with_seven_fractional_digits_and_broken_rows(tmp_path):
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:46.6805901,20,5\n"
                 "2023-11-16 18:17:03.9799600,1046,217\n"
                 "2023-11-16 18:17:04,12\n"
                 "yesterday,5,5\n"
                 "\n"
                 "2023-11-16 18:17:05.0000000,-3,5\n"
                 "2023-11-16 18:17:06.1234567,7930,1000\n")
    assert detect_format(p) == "azure"
    items, problems = split(list(iter_log(p)))
    assert [i.line_no for i in items] == [2, 3, 4, 9]
    assert items[1].offset_s == pytest.approx(1e-7, abs=1e-9)  # 100 ns apart: datetime alone would lose it
    assert items[2].offset_s == pytest.approx(77.29937, abs=1e-9)
    assert items[3].offset_s == pytest.approx(79.4428667, abs=1e-9)
    assert [(i.input_tokens, i.output_tokens) for i in items] == [(374, 44), (20, 5), (1046, 217), (7930, 1000)]
    for i in items:
        assert len(ref_ids(i)) == i.input_tokens and i.body["max_tokens"] == i.output_tokens
        assert i.hash_ids is None and not i.failed and i.fmt == "azure"
    # No sharing: two requests' prompts differ from their first block on.
    assert ref_ids(items[0])[:BLOCK_TOKENS] != ref_ids(items[2])[:BLOCK_TOKENS]
    assert [p.line_no for p in problems] == [5, 6, 8]
    assert "fields" in problems[0].why and "negative" in problems[2].why


def test_burstgpt_csv_flags_failed_requests(tmp_path):
    p = tmp_path / "BurstGPT_1.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n"
                 "5.5,GPT-4,1010,0,1010,Conversation log\n"
                 "7,ChatGPT,x,3,3,Conversation log\n"
                 "65,ChatGPT,80,120,200,API log\n")
    assert detect_format(p) == "burstgpt"
    items, problems = split(list(iter_log(p, synth_endpoint="chat")))
    assert [(i.line_no, i.offset_s, i.failed) for i in items] == [(2, 0.0, False), (3, 0.5, True),
                                                                   (5, 60.0, False)]
    assert items[1].output_tokens == 0 and items[1].body["max_tokens"] == 1  # the API takes no 0
    for i in items:
        assert i.endpoint == "chat" and len(ref_ids(i)) == i.input_tokens == TOK.count_chat(i.body["messages"])
    assert [p.line_no for p in problems] == [4]


def _mooncake(tmp_path, rows, broken=()):
    p = tmp_path / "mooncake_trace.jsonl"
    lines = [json.dumps(r) for r in rows]
    for at, text in broken:
        lines.insert(at, text)
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("endpoint", ["completion", "chat"])
def test_mooncake_shared_hash_ids_give_identical_prefix_blocks(tmp_path, endpoint):
    rows = [
        {"timestamp": 0, "input_length": 1500, "output_length": 40, "hash_ids": [10, 11, 12]},
        {"timestamp": 250, "input_length": 1300, "output_length": 7, "hash_ids": [10, 11, 99]},
        {"timestamp": 1250, "input_length": 2048, "output_length": 1, "hash_ids": [10, 20, 21, 22]},
        {"timestamp": 2000, "input_length": 700, "output_length": 3, "hash_ids": [50, 51]},
        {"timestamp": 2500, "input_length": 3000, "output_length": 3, "hash_ids": [50]},  # fewer ids than blocks
    ]
    p = _mooncake(tmp_path, rows, broken=[(2, "{not json"), (4, json.dumps({"timestamp": 1, "input_length": 5}))])
    assert detect_format(p) == "mooncake"
    items, problems = split(list(iter_log(p, seed=7, synth_endpoint=endpoint)))
    assert [p.line_no for p in problems] == [3, 5]
    assert "output_length" in problems[1].why
    assert [i.offset_s for i in items] == [0.0, 0.25, 1.25, 2.0, 2.5]
    ids = [ref_ids(i) for i in items]
    for i, toks in zip(items, ids):
        assert len(toks) == i.input_tokens and i.body["max_tokens"] == i.output_tokens and i.endpoint == endpoint

    def block(r, b):
        return ids[r][b * BLOCK_TOKENS:(b + 1) * BLOCK_TOKENS]
    assert block(0, 0) == block(1, 0) == block(2, 0) and block(0, 1) == block(1, 1)  # shared ids: identical
    assert block(0, 1) != block(2, 1) and block(0, 2)[:200] != block(1, 2)[:200]  # different ids: different
    assert block(3, 0) == block(4, 0) and block(4, 1) != block(3, 1)[:len(block(4, 1))]
    assert block(0, 0) != block(3, 0)
    # Deterministic for a seed, different for another.
    again = [ref_ids(i) for i in iter_log(p, seed=7, synth_endpoint=endpoint) if isinstance(i, Item)]
    other = [ref_ids(i) for i in iter_log(p, seed=8, synth_endpoint=endpoint) if isinstance(i, Item)]
    assert again == ids and other[0] != ids[0]


def test_synth_counts_are_exact_at_every_length():
    for endpoint in ("completion", "chat"):
        s = PromptSynth(seed=3, endpoint=endpoint)
        for n in [s.min_tokens, s.min_tokens + 1, 511, 512, 513, 1024, 1025, 4097]:
            body = s.body(n, 5, key=n, hash_ids=[1, 2, 3])
            toks = TOK.apply_chat_template(body["messages"]) if endpoint == "chat" else TOK.encode(body["prompt"])
            assert len(toks) == n, (endpoint, n)
        # Below the minimum (the template and one byte) it makes the minimum, never an empty prompt.
        body = s.body(1, 5, key="x")
        text = body["messages"][0]["content"] if endpoint == "chat" else body["prompt"]
        assert len(text) == 1
    with pytest.raises(ValueError, match="'chat' or 'completion'"):
        PromptSynth(endpoint="embeddings")
