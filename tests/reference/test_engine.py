"""The engine on its own: determinism, batching, chunked prefill, preemption, abort, limits."""

import random

import pytest
import torch

from chaos.reference.engine.sequence import SamplingParams

from .conftest import make_engine

pytestmark = pytest.mark.beside  # its slow tests judge state, not time: beside the whole runs under xdist

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def prompts(n, seed=0, lo=5, hi=60):
    rng = random.Random(seed)
    return [[256] + [rng.randrange(256) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


def run_alone(engine, ps, params=GREEDY):
    return [engine.generate([p], params)[0].token_ids for p in ps]


@pytest.mark.slow
def test_greedy_is_identical_across_runs_and_batch_mixes():
    ps = prompts(12)
    alone = run_alone(make_engine(), ps)
    batched = [o.token_ids for o in make_engine().generate(ps, GREEDY)]
    assert batched == alone
    # The same requests mixed with sampled (temperature 1) strangers, at a tight token budget.
    e = make_engine(max_num_batched_tokens=40)
    noisy = prompts(8, seed=3)
    mixed = e.generate(ps + noisy, [GREEDY] * len(ps) + [SamplingParams(temperature=1.0, max_tokens=30)] * 8)
    assert [o.token_ids for o in mixed[:len(ps)]] == alone
    assert all(len(t) == 24 for t in alone)


def test_chunked_prefill_matches_whole_prefill():
    long_prompt = prompts(1, seed=5, lo=700, hi=701)
    whole = make_engine(max_num_batched_tokens=1024).generate(long_prompt, GREEDY)[0]
    chunked_engine = make_engine(max_num_batched_tokens=64)
    chunked = chunked_engine.generate(long_prompt, GREEDY)[0]
    assert chunked.token_ids == whole.token_ids
    assert chunked_engine.num_steps >= 700 // 64 + 24


def test_long_prompt_does_not_stall_running_decodes():
    e = make_engine(max_num_batched_tokens=64)
    e.add_request("short", prompts(1)[0], SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
    e.step()
    e.add_request("long", prompts(1, seed=9, lo=900, hi=901)[0], GREEDY)
    produced = 0
    for _ in range(900 // 63):  # while the long prompt is being prefilled
        produced += sum(1 for o in e.step() if o.request_id == "short" and o.token_ids)
    assert produced == 900 // 63  # the short request decoded one token in every one of those steps


@pytest.mark.slow
def test_every_request_completes_correctly_under_preemption():
    ps = prompts(16, seed=11, lo=30, hi=90)
    expected = run_alone(make_engine(), ps)
    # 24 blocks of 16 tokens: far less than 16 requests of up to ~110 tokens need at once.
    e = make_engine(num_kv_blocks=24, block_size=16)
    outs = e.generate(ps, GREEDY)
    assert [o.token_ids for o in outs] == expected
    assert all(o.finish_reason == "length" for o in outs)
    assert e.scheduler.num_preemptions > 0
    e.block_manager.check_invariants([])
    assert e.block_manager.num_used_blocks == 0


def test_prefix_cache_hits_are_counted_and_output_unchanged():
    shared = prompts(1, seed=2, lo=100, hi=101)[0]
    a, b = shared + [65, 66, 67], shared + [70, 71]
    e = make_engine()
    ra = e.generate([a], GREEDY)[0]
    rb = e.generate([b], GREEDY)[0]
    assert rb.num_cached_tokens == (len(shared) // 16) * 16
    assert e.block_manager.prefix_hits == rb.num_cached_tokens
    cold = make_engine(enable_prefix_caching=False).generate([b], GREEDY)[0]
    assert cold.token_ids == rb.token_ids and cold.num_cached_tokens == 0
    assert ra.token_ids != rb.token_ids or a == b


def test_abort_frees_blocks_at_once_and_mixed_lifecycles_leave_cache_empty():
    e = make_engine(num_kv_blocks=40)
    rng = random.Random(4)
    live = set()
    for i, p in enumerate(prompts(30, seed=6, lo=10, hi=120)):
        e.add_request(f"r{i}", p, SamplingParams(temperature=rng.choice([0.0, 0.8]), max_tokens=rng.randrange(1, 40)))
        live.add(f"r{i}")
        for out in e.step():
            if out.finished:
                live.discard(out.request_id)
        if i % 4 == 3:
            victim = sorted(live)[0]
            out = e.abort_request(victim)
            assert out.finish_reason == "abort"
            live.discard(victim)
            e.block_manager.check_invariants(list(e.seqs.values()))
    while e.has_unfinished_requests():
        e.step()
        e.block_manager.check_invariants(list(e.seqs.values()))
    assert e.block_manager.num_used_blocks == 0
    assert e.abort_request("r0") is None


def test_request_that_cannot_fit_fails_cleanly():
    e = make_engine(num_kv_blocks=4, block_size=16)
    out = e.generate([prompts(1, lo=100, hi=101)[0]], GREEDY)[0]
    assert out.finish_reason == "error" and "KV cache" in out.error
    ok = e.generate([prompts(1, lo=10, hi=11)[0]], SamplingParams(temperature=0, max_tokens=8))[0]
    assert ok.finish_reason in ("length", "stop")
    assert e.block_manager.num_used_blocks == 0


def test_stop_strings_cut_the_text():
    e = make_engine()
    p = prompts(1, seed=1)[0]
    full = e.generate([p], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    text = full.text
    stop = next((text[i:i + 2] for i in range(5, len(text) - 2) if text[i:i + 2].isprintable()), None)
    if stop is None:
        pytest.skip("greedy output has no printable pair to stop on")
    cut = e.generate([p], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == text[:text.index(stop)]


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_temperature_changes_output():
    p = prompts(1, seed=8)[0]
    sp = SamplingParams(temperature=1.0, top_p=0.9, seed=123, max_tokens=30, ignore_eos=True)
    a = make_engine().generate([p], sp)[0].token_ids
    b = make_engine().generate([p] + prompts(3), [sp] + [GREEDY] * 3)[0].token_ids
    assert a == b
    greedy = make_engine().generate([p], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0].token_ids
    assert a != greedy


def test_top_p_tiny_is_greedy():
    p = prompts(1, seed=8)[0]
    e = make_engine()
    g = e.generate([p], GREEDY)[0].token_ids
    t = e.generate([p], SamplingParams(temperature=1.5, top_p=1e-6, max_tokens=24, ignore_eos=True))[0].token_ids
    assert t == g


def test_max_model_len_ends_generation():
    e = make_engine(max_model_len=64)
    out = e.generate([prompts(1, lo=50, hi=51)[0]], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))[0]
    assert out.finish_reason == "length"
    assert out.num_prompt_tokens + out.num_output_tokens == 64


def test_random_weights_are_seeded():
    a = make_engine().model_runner.model.lm_head.weight
    b = make_engine().model_runner.model.lm_head.weight
    assert torch.equal(a, b)


def test_prompt_token_counter_counts_cached_requests_too():
    e = make_engine()
    shared = prompts(1, seed=2, lo=100, hi=101)[0]
    e.generate([shared + [1, 2, 3]], GREEDY)
    e.generate([shared + [4, 5, 6]], GREEDY)
    assert e.block_manager.prefix_hits > 0
    assert e.num_prompt_tokens_total == 2 * (len(shared) + 3)


def test_arrivals_are_admitted_while_a_long_prompt_prefills():
    e = make_engine(max_num_batched_tokens=64)
    e.add_request("long", prompts(1, seed=9, lo=900, hi=901)[0], GREEDY)
    e.step()
    e.add_request("short", prompts(1, seed=1, lo=10, hi=11)[0], GREEDY)
    first_short = first_long = None
    for step in range(1, 200):
        for o in e.step():
            if o.token_ids and o.request_id == "short" and first_short is None:
                first_short = step
            if o.token_ids and o.request_id == "long" and first_long is None:
                first_long = step
        if first_long:
            break
    assert first_short is not None and first_short < first_long


def test_batched_sampling_draws_from_the_right_distribution():
    from chaos.reference.engine.sampler import Sampler
    from chaos.reference.engine.sequence import Sequence

    probs = torch.tensor([0.5, 0.3, 0.2])
    logits = probs.log().repeat(4000, 1)
    sampler = Sampler(torch.device("cpu"), 3)
    sampler.generator.manual_seed(0)

    def freqs(**params):
        seqs = [Sequence(str(i), [1], SamplingParams(**params)) for i in range(len(logits))]
        ids = torch.tensor(sampler(logits, seqs))
        return torch.bincount(ids, minlength=3).float() / len(ids)

    assert torch.allclose(freqs(temperature=1.0), probs, atol=0.03)
    # top_p 0.6 keeps the two most likely tokens, renormalised: 0.625 / 0.375, never the third.
    kept = freqs(temperature=1.0, top_p=0.6)
    assert kept[2] == 0 and torch.allclose(kept[:2], torch.tensor([0.625, 0.375]), atol=0.03)
    # Rows with different temperatures in one batch: a low temperature sharpens towards the top token.
    seqs = [Sequence(str(i), [1], SamplingParams(temperature=0.05 if i % 2 else 1.0)) for i in range(len(logits))]
    ids = torch.tensor(sampler(logits, seqs))
    assert (ids[1::2] == 0).float().mean() > 0.99 and (ids[0::2] == 0).float().mean() < 0.6


# -- one request's failure is that request's alone --------------------------------------------------------------

def hostile(**kw) -> SamplingParams:
    """Params that passed validation, then changed as a buggy caller could: what the engine must survive."""
    p = SamplingParams(temperature=1.0, seed=1, max_tokens=24)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def test_a_row_the_sampler_cannot_draw_fails_alone_and_the_batch_goes_on():
    ps = prompts(4, seed=7)
    expected = run_alone(make_engine(), ps)
    e = make_engine()
    outs = e.generate(ps + prompts(1, seed=8), [GREEDY] * 4 + [hostile(seed=2**64)])  # past torch's manual_seed
    assert [o.token_ids for o in outs[:4]] == expected
    assert outs[4].finish_reason == "error" and outs[4].error_status == 500 and "sampling" in outs[4].error
    assert e.block_manager.num_used_blocks == 0
    e.block_manager.check_invariants([])
    assert e.generate(ps[:1], GREEDY)[0].token_ids == expected[0]  # and it serves on


def test_a_failure_after_sampling_fails_that_request_alone():
    e = make_engine()
    ps = prompts(2, seed=9)
    e.add_request("ok", ps[0], GREEDY)
    e.add_request("bad", ps[1], GREEDY)
    e.texts["bad"].stop = (5,)  # its text assembly now raises TypeError on its first token
    done = {}
    for _ in range(200):
        for out in e.step():
            if out.finished:
                done[out.request_id] = out
        if len(done) == 2:
            break
    assert done["bad"].finish_reason == "error" and done["bad"].error_status == 500
    assert done["ok"].finish_reason == "length" and done["ok"].num_output_tokens == GREEDY.max_tokens
    assert e.block_manager.num_used_blocks == 0 and not e.seqs


def test_add_request_refuses_token_ids_past_the_vocabulary_and_registers_nothing():
    e = make_engine()
    with pytest.raises(ValueError, match="token ids"):
        e.add_request("bad", [256, 10**6], GREEDY)  # else the embedding raises mid-step, for the whole batch
    assert not e.seqs and not e.texts and len(e.scheduler) == 0
    assert e.generate(prompts(1), GREEDY)[0].finish_reason == "length"


def test_sampling_params_refuse_what_would_break_a_step():
    for kw in ({"seed": 2**64}, {"seed": -2**63 - 1}, {"temperature": float("nan")}, {"top_p": float("nan")},
               {"top_k": -1}, {"max_tokens": 0}, {"seed": True}):
        with pytest.raises(ValueError):
            SamplingParams(**kw)
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1 and SamplingParams(seed=-2**63).seed == -2**63


def test_async_engine_fails_a_bad_request_alone_and_serves_on():
    import asyncio

    from chaos.reference.config import EngineConfig, preset
    from chaos.reference.engine.async_engine import AsyncEngine

    async def main():
        eng = AsyncEngine(EngineConfig(model=preset("tiny"), max_model_len=1024))
        eng.start()
        try:
            outs = [o async for o in eng.generate("ids", [256, 10**6], GREEDY)]
            assert outs[-1].finish_reason == "error" and outs[-1].error_status == 400
            outs = [o async for o in eng.generate("seed", [256, 65, 66], hostile(seed=-2**63 - 1))]
            assert outs[-1].finish_reason == "error" and outs[-1].error_status == 500
            good = [o async for o in eng.generate("ok", [256, 65, 66], GREEDY)]
            assert good[-1].finish_reason == "length" and eng.dead is None
            assert eng.engine.block_manager.num_used_blocks == 0
        finally:
            eng.shutdown()

    asyncio.run(main())


def test_top_k_keeps_only_the_k_most_likely():
    from chaos.reference.engine.sampler import Sampler
    from chaos.reference.engine.sequence import Sequence

    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])
    logits = probs.log().repeat(4000, 1)
    sampler = Sampler(torch.device("cpu"), 4)
    sampler.generator.manual_seed(0)
    seqs = [Sequence(str(i), [1], SamplingParams(temperature=1.0, top_k=2 if i % 2 else 0)) for i in range(4000)]
    ids = torch.tensor(sampler(logits, seqs))
    k2 = torch.bincount(ids[1::2], minlength=4).float() / 2000
    assert k2[2:].sum() == 0 and torch.allclose(k2[:2], torch.tensor([4 / 7, 3 / 7]), atol=0.04)
    assert (ids[0::2] >= 2).any()  # top_k 0 (every token) in the same batch still draws the tail
