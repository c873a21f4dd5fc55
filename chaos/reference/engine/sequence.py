"""A request as the engine sees it: token ids, progress, sampling settings, its block table."""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: the protocol layer imports this module and must not need torch
    import torch

# The seeds torch.Generator.manual_seed takes; anything else would raise inside the engine thread.
SEED_MIN, SEED_MAX = -2**63, 2**64 - 1


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: every token; k keeps the k most likely
    max_tokens: int = 16
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self):
        # The HTTP layer validates with field names and codes; this is the engine's own guard, so that
        # nothing a caller builds can make a step raise (NaN fails every comparison, hence the isfinite).
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 2.0):
            raise ValueError("temperature must be in [0, 2]")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError("top_p must be in (0, 1]")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError("top_k must be an integer >= 0")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError("max_tokens must be an integer >= 1")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not SEED_MIN <= self.seed <= SEED_MAX):
            raise ValueError(f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Token ids are the prompt followed by what was generated.

    num_computed_tokens counts the positions whose K/V sit in the cache. A step
    computes the pending positions [num_computed_tokens, num_computed_tokens + n);
    when that reaches the end, the last position's logits are sampled. Prefill,
    chunked prefill, decode and recompute after preemption are all this one rule.
    """

    __slots__ = ("request_id", "token_ids", "num_prompt_tokens", "num_computed_tokens", "status",
                 "params", "block_table", "num_cached_tokens", "finish_reason", "generator",
                 "arrival_time", "first_scheduled_time", "first_token_time", "num_preemptions",
                 "scheduled_tokens", "block_hashes", "num_committed_blocks")

    def __init__(self, request_id: str, prompt_ids: list[int], params: SamplingParams):
        if not prompt_ids:
            raise ValueError("a sequence needs at least one prompt token")
        self.request_id = request_id
        self.token_ids = list(prompt_ids)
        self.num_prompt_tokens = len(prompt_ids)
        self.num_computed_tokens = 0
        self.status = SequenceStatus.WAITING
        self.params = params
        self.block_table: list[int] = []
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at admission
        self.finish_reason: str | None = None
        self.generator: torch.Generator | None = None  # made by the sampler, on its device
        self.arrival_time = time.monotonic()
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.num_preemptions = 0
        self.scheduled_tokens = 0  # tokens this step computes for it
        self.block_hashes: list[int] = []  # chain hash of each full block, computed lazily
        self.num_committed_blocks = 0  # leading blocks already offered to the prefix cache

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_pending_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED


@dataclass(slots=True)
class StepOutput:
    """What one step produced for one request, handed to whoever waits on it."""

    request_id: str
    new_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # stop | length | abort | error
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    num_cached_tokens: int = 0
    error: str | None = None
