"""Byte-level tokenizer: one token per UTF-8 byte, plus a few special tokens.

Token counts are exact and predictable (len(text.encode())), which is what a load
test wants from a reference target.
"""

from __future__ import annotations

import codecs

BOS, EOS, IM_START, IM_END = 256, 257, 258, 259
VOCAB_SIZE = 260
SPECIAL = {BOS: "<s>", EOS: "</s>", IM_START: "<|im_start|>", IM_END: "<|im_end|>"}


class ByteTokenizer:
    vocab_size = VOCAB_SIZE
    bos_id = BOS
    eos_id = EOS
    # Tokens that end generation: EOS, and the end of an assistant turn.
    stop_ids = frozenset({EOS, IM_END})

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_bos else ids

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def count(self, text: str, add_bos: bool = True) -> int:
        """len(encode(text)) without building the list (a 20 MB prompt would be 20 million ints)."""
        return len(text.encode("utf-8")) + add_bos

    def count_chat(self, messages: list[dict]) -> int:
        """len(apply_chat_template(messages)), likewise."""
        per_message = 4  # <|im_start|>, "\n" after the role, <|im_end|>, "\n"
        return (1 + sum(len(m["role"].encode("utf-8")) + len(m["content"].encode("utf-8")) + per_message
                        for m in messages) + 1 + len(b"assistant\n"))

    def apply_chat_template(self, messages: list[dict]) -> list[int]:
        """ChatML: <|im_start|>role\\ncontent<|im_end|>\\n ... then an open assistant turn."""
        ids = [BOS]
        for m in messages:
            ids.append(IM_START)
            ids += f"{m['role']}\n{m['content']}".encode("utf-8")
            ids.append(IM_END)
            ids += b"\n"
        ids.append(IM_START)
        ids += b"assistant\n"
        return ids


class IncrementalDecoder:
    """Turns a growing list of byte tokens into text, holding back split UTF-8 sequences."""

    __slots__ = ("_decoder", "_pending")

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the decoder holds the start of a multi-byte character

    def feed(self, token_id: int) -> str:
        if token_id >= 256:
            return ""
        if token_id < 0x80 and not self._pending:
            return chr(token_id)  # ASCII with nothing held back: the common case, without the codec
        text = self._decoder.decode(bytes((token_id,)))
        self._pending = bool(self._decoder.getstate()[0])
        return text

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
