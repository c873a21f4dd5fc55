"""Prompts of an exact token count for traces that carry lengths but no text.

Counts are the reference server's (chaos/reference/tokenizer.py: one token per UTF-8 byte, a BOS first, ChatML
for chat), reimplemented here so the package runs standalone; the tests check them against the real tokenizer.
The text is ASCII, so bytes = tokens.

Prefix sharing (Mooncake): the prompt's token stream (BOS and the chat template included) is cut into 512-token
blocks, and the text of block b is a function of (seed, hash_ids[b]) only. Two requests whose hash_ids agree on
the first k positions therefore have byte-identical first k blocks, token for token, so a prefix cache hits
exactly where it hit in production. Blocks without a hash id (Azure, BurstGPT, or a Mooncake prompt longer than
its ids) take text unique to the request, which starts with a request-specific tag: nothing is shared by chance.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

BLOCK_TOKENS = 512  # Mooncake's block size
_WORDS = ("latency throughput replica gateway cache block token stream request server model batch queue "
          "timeout retry fallback prefix decode prefill memory bandwidth kernel tensor scheduler budget "
          "window context answer question document section policy customer order invoice shipment warehouse "
          "account balance report quarter revenue contract clause payment refund ticket incident outage "
          "deploy rollback canary region zone node pod container volume network packet route").split()
_POOL_BYTES = 1 << 16
_CHAT_ROLE = "user"
# Reference ChatML around one user message: BOS, <|im_start|>, "user\n" | content | <|im_end|>, "\n",
# <|im_start|>, "assistant\n".
CHAT_PREFIX_TOKENS = 1 + 1 + len(_CHAT_ROLE) + 1
CHAT_SUFFIX_TOKENS = 1 + 1 + 1 + len("assistant\n")
COMPLETION_PREFIX_TOKENS = 1  # BOS


def count_prompt(prompt: str) -> int:
    """Tokens of a completions prompt as the reference server counts them (BOS + UTF-8 bytes)."""
    return len(prompt.encode("utf-8")) + 1


def count_chat(messages: list[dict]) -> int:
    """Tokens of a chat prompt as the reference server counts them (its ChatML template included)."""
    return (1 + sum(len(str(m["role"]).encode("utf-8")) + len(str(m["content"]).encode("utf-8")) + 4
                    for m in messages) + 1 + len(b"assistant\n"))


def count_body(body: dict) -> int | None:
    """The reference count of an OpenAI body's prompt, or None when it is not a well-formed one."""
    msgs = body.get("messages")
    if isinstance(msgs, list) and msgs and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in msgs):
        return count_chat(msgs)
    if isinstance(body.get("prompt"), str):
        return count_prompt(body["prompt"])
    return None


@dataclass(slots=True)
class PromptSynth:
    """Synthesises request bodies for token-count traces; deterministic for a given seed."""

    seed: int = 0
    endpoint: str = "completion"  # completion: {"prompt"}; chat: one user message in the reference ChatML
    _pool: str = ""

    def __post_init__(self):
        if self.endpoint not in ("chat", "completion"):
            raise ValueError(f"synthesised prompts are 'chat' or 'completion', not {self.endpoint!r}")
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, not {self.seed!r}")
        rng = random.Random(self.seed)
        words, size = [], 0
        while size < _POOL_BYTES + BLOCK_TOKENS:
            w = rng.choice(_WORDS)
            words.append(w)
            size += len(w) + 1
        self._pool = " ".join(words)

    @property
    def prefix_tokens(self) -> int:
        return CHAT_PREFIX_TOKENS if self.endpoint == "chat" else COMPLETION_PREFIX_TOKENS

    @property
    def min_tokens(self) -> int:
        """The smallest prompt it can make: the template and one byte (the reference refuses empty prompts)."""
        extra = CHAT_SUFFIX_TOKENS if self.endpoint == "chat" else 0
        return self.prefix_tokens + extra + 1

    def text(self, input_tokens: int, key, hash_ids: list[int] | None = None) -> str:
        """The prompt text (the chat message's content) so that the whole prompt is input_tokens tokens
        (at least min_tokens). key makes unshared blocks unique to one request (the line number)."""
        total = max(int(input_tokens), self.min_tokens)
        content = total - self.min_tokens + 1
        ids = hash_ids or []
        parts, size, b = [], 0, 0
        while size < content:
            width = BLOCK_TOKENS - self.prefix_tokens if b == 0 else BLOCK_TOKENS
            name = f"h{ids[b]}" if b < len(ids) else f"u{key}.{b}"
            parts.append(self._block(name, width))
            size += width
            b += 1
        return "".join(parts)[:content]

    def body(self, input_tokens: int, output_tokens: int | None, key,
             hash_ids: list[int] | None = None) -> dict:
        """An OpenAI body: the prompt of input_tokens tokens, max_tokens = output_tokens (at least 1: the API
        takes no 0, and a trace's 0 means a failed request, which the Item flags)."""
        text = self.text(input_tokens, key, hash_ids)
        out = max(1, int(output_tokens or 0))
        if self.endpoint == "chat":
            return {"messages": [{"role": _CHAT_ROLE, "content": text}], "max_tokens": out}
        return {"prompt": text, "max_tokens": out}

    def _block(self, name: str, width: int) -> str:
        # The tag keeps two blocks apart even if their pool slices coincide; the slice makes it read like text.
        digest = hashlib.blake2b(f"{self.seed}:{name}".encode(), digest_size=8).digest()
        start = int.from_bytes(digest, "little") % _POOL_BYTES
        tag = f"[{name}] "
        return (tag + self._pool[start:start + width])[:width]
