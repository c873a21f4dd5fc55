import random

from chaos.reference.engine.block_manager import BlockManager
from chaos.reference.engine.sequence import SamplingParams, Sequence


def seq(rid, ids):
    return Sequence(rid, ids, SamplingParams(max_tokens=4))


def admit(bm, s, n=None):
    cached = bm.match_prefix(s)
    total = len(s) if n is None else n
    assert bm.can_allocate(cached, total)
    bm.allocate(s, cached, total)
    s.num_computed_tokens = total
    bm.commit_full_blocks(s)


def test_shared_prefix_blocks_are_reused_and_counted():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq("a", list(range(10)))  # blocks [0..3] [4..7] [8,9]
    admit(bm, a)
    b = seq("b", list(range(8)) + [50, 51, 52])
    cached = bm.match_prefix(b)
    assert cached == a.block_table[:2]
    admit(bm, b)
    assert b.num_cached_tokens == 8
    assert bm.blocks[a.block_table[0]].ref_count == 2
    assert bm.prefix_hits == 8 and bm.prefix_queries == 21
    bm.check_invariants([a, b])
    bm.free(a)
    bm.free(b)
    bm.check_invariants([])
    assert bm.num_used_blocks == 0


def test_last_token_is_never_served_from_cache():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(8)))
    admit(bm, a)
    b = seq("b", list(range(8)))  # identical: only the first block may come from the cache
    assert len(bm.match_prefix(b)) == 1


def test_freed_blocks_stay_cached_until_reallocated():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq("a", list(range(9)))
    admit(bm, a)
    bm.free(a)
    again = seq("again", list(range(9)))
    assert len(bm.match_prefix(again)) == 2  # revived from the free list
    # Claim every block with unrelated content: the cached ones are evicted.
    filler = seq("filler", [99] * 16)
    admit(bm, filler)
    assert bm.match_prefix(seq("late", list(range(9)))) == []
    bm.free(filler)
    bm.check_invariants([])


def test_can_allocate_counts_revived_blocks_and_respects_cap():
    bm = BlockManager(num_blocks=4, block_size=4)
    a = seq("a", list(range(12)))
    admit(bm, a)
    assert bm.num_usable_free_blocks == 1
    bm.set_block_cap(2)
    assert bm.num_usable_free_blocks == -1
    assert not bm.can_append(a, 12)
    bm.set_block_cap(None)
    assert bm.can_append(a, 13) and not bm.can_append(a, 17)


def test_random_mix_of_admit_grow_free_keeps_invariants():
    rng = random.Random(7)
    bm = BlockManager(num_blocks=64, block_size=4)
    live = []
    prefixes = [[rng.randrange(256) for _ in range(rng.randrange(4, 20))] for _ in range(4)]
    for i in range(400):
        op = rng.random()
        if op < 0.5 or not live:
            ids = rng.choice(prefixes) + [rng.randrange(256) for _ in range(rng.randrange(1, 12))]
            s = seq(f"s{i}", ids)
            cached = bm.match_prefix(s)
            if bm.can_allocate(cached, len(s)):
                admit(bm, s)
                live.append(s)
        elif op < 0.8:
            s = rng.choice(live)
            s.token_ids.append(rng.randrange(256))
            if bm.can_append(s, len(s)):
                bm.append(s, len(s))
                s.num_computed_tokens = len(s)
                bm.commit_full_blocks(s)
            else:
                s.token_ids.pop()
        else:
            s = live.pop(rng.randrange(len(live)))
            bm.free(s)
        bm.check_invariants(live)
    for s in live:
        bm.free(s)
    bm.check_invariants([])
    assert bm.num_used_blocks == 0
    assert bm.prefix_hits > 0
