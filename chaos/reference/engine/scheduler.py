"""Continuous batching: every step mixes running decodes, prefill chunks and new arrivals.

One token budget per step (max_num_batched_tokens) is shared by all sequences. Running
sequences go first, oldest first, so a long prompt is prefilled a chunk at a time and
never stalls the decodes around it; while requests wait, a prefill chunk takes at most a
quarter of the budget, so arrivals are admitted instead of queueing behind it. When the KV cache runs out, the newest running
sequence is preempted: its blocks are freed and it is recomputed later (its prefix may
still be cached). A sequence that cannot fit even alone fails cleanly instead of
looping.
"""

from __future__ import annotations

from collections import deque

from ..config import EngineConfig
from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.long_prefill_chunk = max(1, config.max_num_batched_tokens // 4)
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def __len__(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out (finished or aborted) and free its blocks at once."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self) -> tuple[list[Sequence], list[Sequence]]:
        """Sequences to compute this step (scheduled_tokens set), and those that can never fit."""
        bm = self.block_manager
        budget = self.max_num_batched_tokens
        scheduled: list[Sequence] = []
        infeasible: list[Sequence] = []
        preempted = False

        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_pending_tokens, budget)
            if n > 1 and self.waiting:
                n = min(n, self.long_prefill_chunk)  # leave room so arrivals are not held behind a long prompt
            while not bm.can_append(seq, seq.num_computed_tokens + n):
                victim = self.running.pop()  # newest; never one already scheduled (those are before i)
                if victim is seq and i == 0:
                    # Alone and still no room: the cache (or its fault-injected cap) is too small.
                    self.running.append(seq)
                    infeasible.append(seq)
                    self.remove(seq)
                    break
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                bm.append(seq, seq.num_computed_tokens + n)
                seq.scheduled_tokens = n
                scheduled.append(seq)
                budget -= n
                i += 1
                continue
            break

        # No admissions in a step that had to preempt: the cache is full.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not preempted:
            seq = self.waiting[0]
            cached = bm.match_prefix(seq)
            num_cached = len(cached) * bm.block_size
            n = min(len(seq) - num_cached, budget)
            if not bm.can_allocate(cached, num_cached + n):
                if not self.running:  # even an empty cache cannot take it
                    self.waiting.popleft()
                    seq.status = SequenceStatus.FINISHED
                    infeasible.append(seq)
                    continue
                break
            self.waiting.popleft()
            bm.allocate(seq, cached, num_cached + n)
            seq.status = SequenceStatus.RUNNING
            seq.scheduled_tokens = n
            self.running.append(seq)
            scheduled.append(seq)
            budget -= n
        return scheduled, infeasible
