"""The tokenizers the load sizes prompts with, by name: what a request's input_tokens counts.

byte: the bundled reference server's counts (one token a UTF-8 byte, a BOS first, chat framed as ChatML), taken
from the bytes alone. Against that server every count is exact (records say input_tokens_source: exact). The
server keeps its own tokenizer (chaos/reference/ imports nothing of the toolkit), so this is the load's own
reading of the same rules; tests/load/test_units.py holds the two equal.
estimate: any other server, whose tokenizer and chat template are unknown: about 4 bytes a token, plus a small
allowance a message and a prompt (records say input_tokens_source: estimate).

The name used is in the load's summary.json ("tokenizer") and its load-config.json.
"""

from __future__ import annotations

BYTE, ESTIMATE = "byte", "estimate"
TOKENIZERS = (BYTE, ESTIMATE)
BYTES_PER_TOKEN = 4  # the estimate: English prose runs at about 4 bytes a token on BPE vocabularies

# The reference server's ChatML: BOS, then per message <|im_start|>role\ncontent<|im_end|>\n, then the open
# reply <|im_start|>assistant\n. Special tokens count one each; everything else one a byte.
_BOS = 1
_PER_MESSAGE = 4  # <|im_start|>, the "\n" after the role, <|im_end|>, the "\n" after it
_REPLY = 1 + len(b"assistant\n")
# The estimate's allowance for what an unknown template adds (role markers, separators).
_EST_PER_MESSAGE, _EST_PER_CHAT = 4, 3


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


class TokenCounter:
    """Counts prompts as the named tokenizer would: exactly (byte) or roughly (estimate)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str = BYTE):
        if kind not in TOKENIZERS:
            raise ValueError(f"tokenizer must be {' or '.join(repr(t) for t in TOKENIZERS)}, not {kind!r}")
        self.kind = kind

    @property
    def source(self) -> str:
        """What a record's input_tokens_source says of these counts."""
        return "exact" if self.kind == BYTE else "estimate"

    def count_text(self, text: str) -> int:
        n = _utf8(text)
        return n if self.kind == BYTE else max(1, round(n / BYTES_PER_TOKEN))

    def count_chat(self, messages: list[dict]) -> int:
        """The whole prompt of a chat request: template included."""
        if self.kind == BYTE:
            return _BOS + sum(_utf8(m["role"]) + _utf8(m["content"]) + _PER_MESSAGE for m in messages) + _REPLY
        return sum(self.count_text(m["content"]) + _EST_PER_MESSAGE for m in messages) + _EST_PER_CHAT

    def count_prompt(self, prompt: str) -> int:
        """The whole prompt of a completions request."""
        return _BOS + _utf8(prompt) if self.kind == BYTE else self.count_text(prompt)

    def bytes_for(self, tokens: int) -> int:
        """ASCII filler bytes that make this many tokens."""
        return tokens if self.kind == BYTE else tokens * BYTES_PER_TOKEN
