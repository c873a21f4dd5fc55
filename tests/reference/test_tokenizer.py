from chaos.reference.tokenizer import BOS, IM_END, IM_START, ByteTokenizer, IncrementalDecoder


def test_encode_is_one_token_per_byte_plus_bos():
    tok = ByteTokenizer()
    text = "héllo, 世界"
    ids = tok.encode(text)
    assert ids[0] == BOS
    assert len(ids) == 1 + len(text.encode())
    assert tok.decode(ids) == text


def test_chat_template_is_chatml_with_open_assistant_turn():
    tok = ByteTokenizer()
    ids = tok.apply_chat_template([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert ids.count(IM_START) == 3 and ids.count(IM_END) == 2
    assert bytes(i for i in ids if i < 256).endswith(b"user\nhi\nassistant\n")


def test_counts_equal_the_lengths_of_what_encoding_builds():
    # count and count_chat (the server's context check, the load's input_tokens) must agree with the ids
    tok = ByteTokenizer()
    for text in ("", "a", "héllo, 世界 🎉", "x" * 300):
        assert tok.count(text) == len(tok.encode(text))
        assert tok.count(text, add_bos=False) == len(tok.encode(text, add_bos=False))
    for messages in ([{"role": "user", "content": "hi"}],
                     [{"role": "system", "content": "be brief"}, {"role": "user", "content": "世界"},
                      {"role": "assistant", "content": ""}, {"role": "tool", "content": "🎉" * 7}]):
        assert tok.count_chat(messages) == len(tok.apply_chat_template(messages))


def test_incremental_decoder_holds_back_split_utf8():
    dec = IncrementalDecoder()
    pieces = [dec.feed(b) for b in "世".encode()]
    assert pieces == ["", "", "世"]
    assert dec.feed(IM_END) == ""
    dec.feed(0xE4)
    assert dec.flush() == "\ufffd"


def test_incremental_decoding_equals_decoding_the_whole_bytes():
    # ASCII takes a fast path; split, invalid and mixed multi-byte sequences go through the codec.
    import random

    rng = random.Random(0)
    for _ in range(2000):
        data = bytes(rng.choice([rng.randrange(128), rng.randrange(256)]) for _ in range(rng.randrange(1, 30)))
        d = IncrementalDecoder()
        assert "".join(d.feed(b) for b in data) + d.flush() == data.decode("utf-8", errors="replace"), data
