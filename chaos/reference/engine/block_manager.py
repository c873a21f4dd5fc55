"""Paged KV cache bookkeeping: fixed-size blocks, block tables, hash-chained prefix caching.

A block holds block_size positions of K/V for every layer. Full blocks are named by a
hash chained over all tokens before and in them, so two requests that share a prefix
share its blocks (reference counted). Freed blocks keep their hash on an LRU free list
and are reused as cache hits until a new allocation claims them.
"""

from __future__ import annotations

from collections import OrderedDict

from .sequence import Sequence


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] = ()


def chain_hash(parent: int | None, token_ids: tuple[int, ...]) -> int:
    return hash((parent, token_ids))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.block_cap: int | None = None  # fault hook: fewer usable blocks than exist
        self.prefix_queries = 0  # prompt tokens looked up
        self.prefix_hits = 0  # of which found in the cache

    # -- capacity ---------------------------------------------------------------------------
    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    @property
    def capacity(self) -> int:
        return self.num_blocks if self.block_cap is None else min(self.block_cap, self.num_blocks)

    @property
    def num_usable_free_blocks(self) -> int:
        return self.capacity - self.num_used_blocks  # negative while a cap is being enforced

    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    def set_block_cap(self, cap: int | None) -> None:
        if cap is not None and cap < 1:
            raise ValueError("block cap must be >= 1")
        self.block_cap = cap

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix cache -----------------------------------------------------------------------
    def _hashes(self, seq: Sequence, num_full_blocks: int) -> list[int]:
        bs = self.block_size
        while len(seq.block_hashes) < num_full_blocks:
            i = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if i else None
            seq.block_hashes.append(chain_hash(parent, tuple(seq.token_ids[i * bs:(i + 1) * bs])))
        return seq.block_hashes[:num_full_blocks]

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks for the longest run of full blocks this sequence starts with.

        The last token is never taken from the cache: its logits are needed to sample.
        """
        if not self.enable_prefix_caching:
            return []
        bs = self.block_size
        hits: list[int] = []
        for i, h in enumerate(self._hashes(seq, (len(seq) - 1) // bs)):
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            block = self.blocks[block_id]
            if block.token_ids != tuple(seq.token_ids[i * bs:(i + 1) * bs]):
                break  # a hash collision: treat as a miss
            hits.append(block_id)
        return hits

    # -- allocation ---------------------------------------------------------------------------
    def can_allocate(self, cached: list[int], num_tokens: int) -> bool:
        """Room to admit a sequence whose first num_tokens positions need blocks."""
        revived = sum(1 for b in cached if self.blocks[b].ref_count == 0)
        new = self.blocks_for(num_tokens) - len(cached)
        return revived + new <= self.num_usable_free_blocks

    def allocate(self, seq: Sequence, cached: list[int], num_tokens: int) -> None:
        assert not seq.block_table, "sequence already holds blocks"
        for block_id in cached:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_blocks[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
        seq.num_cached_tokens = len(cached) * self.block_size
        seq.num_computed_tokens = seq.num_cached_tokens
        self.prefix_queries += seq.num_prompt_tokens
        self.prefix_hits += min(seq.num_cached_tokens, seq.num_prompt_tokens)
        self.append(seq, num_tokens)

    def can_append(self, seq: Sequence, num_tokens: int) -> bool:
        need = self.blocks_for(num_tokens) - len(seq.block_table)
        if need <= 0 and self.block_cap is None:
            return True  # most decode steps: the last block has room, and without a cap nothing is over budget
        return need <= self.num_usable_free_blocks  # under a cap, even no new block can be too many

    def append(self, seq: Sequence, num_tokens: int) -> None:
        """Grow the block table to cover num_tokens positions."""
        for _ in range(self.blocks_for(num_tokens) - len(seq.block_table)):
            seq.block_table.append(self._take_free_block())

    def _take_free_block(self) -> int:
        block_id, _ = self.free_blocks.popitem(last=False)  # least recently freed first
        block = self.blocks[block_id]
        if block.hash is not None:
            if self.hash_to_block.get(block.hash) == block_id:
                del self.hash_to_block[block.hash]
            block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id

    def free(self, seq: Sequence) -> None:
        # Tail first, so a shared prefix's head blocks are the last to be evicted.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {block_id} freed twice"
            if block.ref_count == 0:
                self.free_blocks[block_id] = None
        seq.block_table = []
        seq.num_committed_blocks = 0

    def commit_full_blocks(self, seq: Sequence) -> None:
        """Name newly completed blocks so later requests can share them."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        num_full = min(seq.num_computed_tokens // bs, len(seq.block_table))
        if num_full <= seq.num_committed_blocks:
            return  # most decode steps: no block filled up
        hashes = self._hashes(seq, num_full)
        for i in range(seq.num_committed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is not None:
                continue
            h = hashes[i]
            if h in self.hash_to_block:
                continue  # the same content was computed twice at once; keep the first
            block.hash, block.token_ids = h, tuple(seq.token_ids[i * bs:(i + 1) * bs])
            self.hash_to_block[h] = block.block_id
        seq.num_committed_blocks = max(seq.num_committed_blocks, num_full)

    def check_invariants(self, live: list[Sequence]) -> None:
        """Raise AssertionError unless reference counts match the live block tables."""
        counts = [0] * self.num_blocks
        for seq in live:
            for b in seq.block_table:
                counts[b] += 1
        for block, n in zip(self.blocks, counts):
            assert block.ref_count == n, f"block {block.block_id}: ref_count {block.ref_count}, held {n}"
            assert (n == 0) == (block.block_id in self.free_blocks), f"block {block.block_id} free-list mismatch"
        for h, b in self.hash_to_block.items():
            assert self.blocks[b].hash == h
