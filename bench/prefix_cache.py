"""Time to first token (TTFT) with a long shared prefix: prefix-cache hit vs cold prefill.

What it measures
----------------
Each repetition draws a fresh 2,000-token prefix P (BOS + random ASCII bytes, never seen
before) and two different short suffixes a and b (default 24 tokens each). Three
single-request measurements are made, each with max_tokens=1 and temperature 0:

* cold (caching off):   P+b on a second engine built with enable_prefix_caching=False.
* cold (fresh prefix):  P+a on the caching engine; P has never been seen, so this is also
                        a full prefill. It leaves P's blocks in the prefix cache.
* cached:               P+b on the caching engine, right after P+a finished; the 125
                        full 16-token blocks of P are served from the cache and only the
                        suffix is computed (one step).

TTFT = wall time (perf_counter) from ``add_request`` to the return of the ``step()``
that first yields a token for the request. The engine prefills a long prompt in chunks
of max_num_batched_tokens (512 by default), so a cold 2,024-token prompt takes 4 steps.
Reported: median / min / max TTFT per kind over the repetitions and the ratio of the
medians (the project aims for cold / cached >= 4x). The cached request's first token is
also compared with the caching-off engine's for the same prompt (greedy, so it should
match), and the number of prompt tokens the engine reports as cached is shown.

Usage: python bench/prefix_cache.py [--quick] [--preset small] [--prefix-len 2000] [--reps 10]
"""

from __future__ import annotations

import random
import sys

from _common import (Stopwatch, base_parser, make_engine, median, print_header, print_table, random_bytes,
                     random_prompt)

from chaos.reference.engine.sequence import SamplingParams


def ttft(engine, rid, prompt, params):
    """Stopwatch from add_request to the step that returns the first token; steps; the first output."""
    steps0 = engine.num_steps
    sw = Stopwatch()
    engine.add_request(rid, prompt, params)
    while True:
        outs = [o for o in engine.step() if o.request_id == rid]
        if outs and outs[0].token_ids:
            sw.stop()
            first = outs[0]
            break
        if outs and outs[0].finished:
            raise RuntimeError(f"{rid} finished without a token: {outs[0].finish_reason} {outs[0].error}")
    # max_tokens=1: the request is finished by now; drain anything left just in case.
    while engine.has_unfinished_requests():
        engine.step()
    return sw, engine.num_steps - steps0, first


def main(argv=None) -> int:
    p = base_parser(__doc__)
    p.add_argument("--prefix-len", type=int, default=2000, help="shared prefix tokens incl. BOS (default 2000)")
    p.add_argument("--suffix-len", type=int, default=24, help="suffix tokens (default 24)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 10; quick 3)")
    args = p.parse_args(argv)
    reps = args.reps or (3 if args.quick else 10)

    cached_engine = make_engine(args.preset, enable_prefix_caching=True, dtype=args.dtype)
    cold_engine = make_engine(args.preset, enable_prefix_caching=False, dtype=args.dtype)
    print_header("prefix cache: TTFT with a shared prefix, cached vs cold", args, cached_engine)
    total = args.prefix_len + args.suffix_len
    if total >= cached_engine.config.max_model_len:
        print(f"prefix + suffix = {total} tokens does not fit max_model_len {cached_engine.config.max_model_len}")
        return 2
    bs = cached_engine.config.block_size
    chunk = cached_engine.config.max_num_batched_tokens
    print(f"prefix {args.prefix_len} tokens ({args.prefix_len // bs} full blocks of {bs}), suffix {args.suffix_len} "
          f"tokens, prompt {total} tokens, prefill chunk {chunk} tokens, max_tokens 1, {reps} repetition(s)")

    params = SamplingParams(temperature=0.0, max_tokens=1)
    rng = random.Random(args.seed)

    def one_rep(tag):
        prefix = random_prompt(rng, args.prefix_len)
        a = prefix + random_bytes(rng, args.suffix_len)
        b = prefix + random_bytes(rng, args.suffix_len)
        off = ttft(cold_engine, f"{tag}-off", b, params)
        fresh = ttft(cached_engine, f"{tag}-fresh", a, params)
        hit = ttft(cached_engine, f"{tag}-hit", b, params)
        return off, fresh, hit

    one_rep("warm")  # warm-up, not recorded
    one_rep("warm2")

    rows = []
    t_off, t_fresh, t_hit = [], [], []
    u_off, u_fresh, u_hit = [], [], []
    matches = 0
    for r in range(reps):
        off, fresh, hit = one_rep(f"r{r}")
        t_off.append(off[0].wall)
        t_fresh.append(fresh[0].wall)
        t_hit.append(hit[0].wall)
        u_off.append(off[0].cpu_util)
        u_fresh.append(fresh[0].cpu_util)
        u_hit.append(hit[0].cpu_util)
        matches += off[2].token_ids == hit[2].token_ids
        rows.append([r + 1, 1000 * off[0].wall, off[1], 1000 * fresh[0].wall, fresh[1], 1000 * hit[0].wall, hit[1],
                     hit[2].num_cached_tokens])

    print()
    print_table(["rep", "cold/off ms", "steps", "cold/fresh ms", "steps", "cached ms", "steps", "cached tokens"], rows)

    m_off, m_fresh, m_hit = median(t_off), median(t_fresh), median(t_hit)
    print()
    print_table(["TTFT", "median ms", "min ms", "max ms", "median vs cached", "cpu util"], [
        ["cold, prefix caching off", 1000 * m_off, 1000 * min(t_off), 1000 * max(t_off), f"{m_off / m_hit:.1f}x",
         median(u_off)],
        ["cold, fresh prefix (caching on)", 1000 * m_fresh, 1000 * min(t_fresh), 1000 * max(t_fresh),
         f"{m_fresh / m_hit:.1f}x", median(u_fresh)],
        ["cached prefix", 1000 * m_hit, 1000 * min(t_hit), 1000 * max(t_hit), "1.0x", median(u_hit)],
    ])
    ratio = min(m_off, m_fresh) / m_hit
    print()
    print(f"aim cold/cached >= 4x: {'MET' if ratio >= 4 else 'MISSED'} "
          f"({m_off / m_hit:.1f}x vs caching off, {m_fresh / m_hit:.1f}x vs fresh prefix)")
    print("(cpu util = median process CPU s / wall s; ~2 on an idle 2-core box)")
    print(f"check: cached first token equals caching-off first token in {matches}/{reps} repetitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
