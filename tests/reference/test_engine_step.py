"""One engine step's host side: the packed inputs, the block manager's fast path, the sampler's row split,
and the replay that bench/host_overhead.py times as the bare forward."""

import random

import pytest
import torch

from chaos.reference.engine.block_manager import BlockManager
from chaos.reference.engine.sequence import SamplingParams, Sequence

from .conftest import make_engine
from .test_engine import GREEDY, prompts


def test_prepare_packs_decodes_with_padded_block_tables_and_prefill_chunks():
    # Block size 4 and prompts of different lengths: decodes of different table widths share a step with a
    # prefill chunk (budget 12), so the packing of every field is exercised.
    e = make_engine(block_size=4, max_num_batched_tokens=12)
    for i, n in enumerate((3, 9, 14)):
        e.add_request(f"d{i}", prompts(1, seed=i, lo=n, hi=n + 1)[0], SamplingParams(temperature=0, max_tokens=50))
    while any(s.num_output_tokens == 0 for s in e.seqs.values()):
        e.step()
    e.add_request("p", prompts(1, seed=7, lo=40, hi=41)[0], GREEDY)
    scheduled, _ = e.scheduler.schedule()
    ids, pos, meta, sampling = e.model_runner.prepare(scheduled)

    decodes = [s for s in scheduled if s.scheduled_tokens == 1]
    prefill = next(s for s in scheduled if s.scheduled_tokens > 1)
    assert len(decodes) == 3 and prefill.request_id == "p" and sampling == decodes  # the chunk ends short
    lens = [s.num_computed_tokens + 1 for s in decodes]
    width = -(-max(lens) // 4)
    want_tables = [s.block_table[:width] + [0] * (width - len(s.block_table[:width])) for s in decodes]
    assert meta.decode_block_tables.tolist() == want_tables
    assert meta.decode_context_lens.tolist() == lens
    assert meta.decode_indices.tolist() == [scheduled.index(s) for s in decodes]  # packed rows: one each
    start = prefill.num_computed_tokens
    assert pos.tolist()[-prefill.scheduled_tokens:] == list(range(start, start + prefill.scheduled_tokens))
    for row, s in enumerate(decodes):
        p = s.num_computed_tokens
        assert ids[row].item() == s.token_ids[p] and pos[row].item() == p
        assert meta.slot_mapping[row].item() == s.block_table[p // 4] * 4 + p % 4
    assert meta.logits_indices.tolist() == list(range(3))


def test_decode_only_step_has_no_row_indices():
    e = make_engine()
    e.generate(prompts(2), SamplingParams(temperature=0, max_tokens=1))  # warm, then a pure decode step
    for i, p in enumerate(prompts(3, seed=1)):
        e.add_request(str(i), p, SamplingParams(temperature=0, max_tokens=10))
    e.step()
    scheduled, _ = e.scheduler.schedule()
    _, _, meta, sampling = e.model_runner.prepare(scheduled)
    assert len(sampling) == 3 and meta.logits_indices is None and meta.decode_indices is None
    assert meta.decode_block_tables.shape[0] == 3


def test_can_append_without_a_new_block_still_obeys_a_cap():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = Sequence("a", list(range(6)), SamplingParams())
    bm.allocate(s, [], 6)  # two blocks; position 6 still fits the second
    assert bm.can_append(s, 7)
    bm.set_block_cap(1)  # fewer usable blocks than it holds: even a step that needs no block is over budget
    assert not bm.can_append(s, 7)
    bm.set_block_cap(2)
    assert bm.can_append(s, 7) and not bm.can_append(s, 9)


def test_sampler_splits_greedy_shared_and_seeded_rows():
    e = make_engine()
    sampler = e.model_runner.sampler
    logits = torch.randn(4, 260, generator=torch.Generator().manual_seed(0))
    kinds = [SamplingParams(temperature=0), SamplingParams(temperature=1.0, seed=5),
             SamplingParams(temperature=1.0), SamplingParams(temperature=0)]
    seqs = [Sequence(str(i), [1], p) for i, p in enumerate(kinds)]
    ids = sampler(logits, seqs)
    greedy = logits[:, :sampler.emittable_vocab].argmax(dim=-1)
    assert ids[0] == greedy[0].item() and ids[3] == greedy[3].item()
    alone = sampler(logits[1:2], [Sequence("x", [1], kinds[1])])[0]  # a fresh generator of the same seed
    assert ids[1] == alone


@pytest.mark.parametrize("seed", [0, 1])
def test_replaying_a_steps_inputs_leaves_the_outputs_unchanged(seed):
    # bench/host_overhead.py times each step's own inputs again through the bare forward; that must not
    # disturb the engine (the replay writes the same K/V into the same slots).
    ps = prompts(6, seed=seed)
    want = [o.token_ids for o in make_engine().generate(ps, GREEDY)]
    e = make_engine()
    runner, prepare, seen = e.model_runner, e.model_runner.prepare, []

    def keep(seqs):
        seen.append(prepare(seqs))
        return seen[-1]

    runner.prepare = keep
    rng = random.Random(seed)
    for i, p in enumerate(ps):
        e.add_request(str(i), p, GREEDY)
    got: dict[str, tuple] = {str(i): () for i in range(len(ps))}
    while e.has_unfinished_requests():
        for out in e.step():
            got[out.request_id] += out.token_ids
        ids, pos, meta, _ = seen[-1]
        for _ in range(rng.randrange(1, 3)):
            with torch.inference_mode():
                runner.model.compute_logits(runner.model(ids, pos, runner.kv_caches, meta))
    assert [got[str(i)] for i in range(len(ps))] == want
