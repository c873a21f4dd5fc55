"""Decode step time vs batch size.

What it measures
----------------
For each batch size B (default 1, 2, 4, 8, 16, 32, 64) on one engine: B fresh requests
with prompts of --prompt-len tokens (default 64; temperature 0, ignore_eos) are added,
and the engine is stepped until every one of them has finished its prefill and sampled
its first token, so each following step is a pure decode step of B tokens. After
--warm-steps untimed decode steps, --steps decode steps (default 64) are each timed with
perf_counter around ``engine.step()`` (scheduling, input preparation, the forward pass,
sampling and output handling: everything a decode step costs). The remaining requests
are then aborted.

The whole sweep is repeated --rounds times (default 3) and, per B, the round with the
lowest median is reported (the least disturbed by other load); every round's median is
listed too. Reported per B: median and mean ms/step, p90 ms/step, decode tokens/s
(B / median step time), the speed-up of tokens/s over B=1 and the process's CPU
utilisation (CPU s / wall s) over the timed steps. The context grows by one position per step,
so while timed it spans roughly prompt-len+warm .. prompt-len+warm+steps positions; the
exact range over all B requests is shown (requests admitted in an earlier prefill step are
a few positions ahead). "prefill steps" counts the steps until all B had their first token.

Usage: python bench/decode_step.py [--quick] [--preset small] [--batch-sizes 1,2,4,8,16,32,64] [--steps 64]
"""

from __future__ import annotations

import random
import statistics
import sys

from _common import (Stopwatch, base_parser, make_engine, median, now, print_header, print_table, random_prompt,
                     start_decoding)

from chaos.reference.engine.sequence import SamplingParams


def measure(engine, rng, batch, prompt_len, warm_steps, steps, tag):
    # Requests admitted early start decoding while later ones still prefill, so leave ample
    # room; whatever is left is aborted at the end.
    room = engine.config.max_model_len - prompt_len - 1
    params = SamplingParams(temperature=0.0, max_tokens=room, ignore_eos=True)
    rids, seqs, prefill_steps = start_decoding(
        engine, [random_prompt(rng, prompt_len) for _ in range(batch)], params, tag)
    assert all(s.num_pending_tokens == 1 for s in seqs)
    for _ in range(warm_steps):
        engine.step()
    ctx_lo = min(s.num_computed_tokens for s in seqs) + 1  # context of the first timed step
    times = []
    sw = Stopwatch()
    for _ in range(steps):
        t0 = now()
        outs = engine.step()
        times.append(now() - t0)
        if len(outs) != batch or any(o.finished for o in outs):
            raise RuntimeError(f"B={batch}: a timed step produced {len(outs)} outputs, expected {batch} decodes")
    sw.stop()
    ctx = (ctx_lo, max(s.num_computed_tokens for s in seqs))
    for rid in rids:
        engine.abort_request(rid)
    return times, prefill_steps, ctx, sw.cpu_util


def main(argv=None) -> int:
    p = base_parser(__doc__)
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens per request (default 64; quick 32)")
    p.add_argument("--steps", type=int, default=None, help="timed decode steps per batch size (default 64; quick 8)")
    p.add_argument("--warm-steps", type=int, default=None, help="untimed decode steps first (default 4; quick 2)")
    p.add_argument("--rounds", type=int, default=None,
                   help="passes over all batch sizes; per B the round with the lowest median is shown "
                        "(default 3; quick 1)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    prompt_len = args.prompt_len or (32 if args.quick else 64)
    steps = args.steps or (8 if args.quick else 64)
    warm_steps = args.warm_steps if args.warm_steps is not None else (2 if args.quick else 4)
    rounds = args.rounds or (1 if args.quick else 3)

    engine = make_engine(args.preset, max_num_seqs=max(64, *sizes), dtype=args.dtype)
    print_header("decode step time vs batch size", args, engine)
    print(f"batch sizes {sizes}, prompt {prompt_len} tokens, {warm_steps} untimed + {steps} timed decode steps each, "
          f"{rounds} round(s)")
    rng = random.Random(args.seed)

    # Warm-up: a small batch through prefill and decode.
    measure(engine, rng, 4, prompt_len, 2, 4, "warm")

    best: dict[int, tuple] = {}
    all_medians: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(rounds):
        for b in sizes:
            res = measure(engine, rng, b, prompt_len, warm_steps, steps, f"r{r}b{b}")
            med = median(res[0])
            all_medians[b].append(med)
            if b not in best or med < median(best[b][0]):
                best[b] = res
        print(f"  round {r + 1}/{rounds} done", flush=True)

    rows = []
    base_tps = None
    for b in sizes:
        times, prefill_steps, ctx, util = best[b]
        med = median(times)
        tps = b / med
        if base_tps is None:
            base_tps = tps
        p90 = sorted(times)[min(len(times) - 1, int(0.9 * len(times)))]
        spread = "/".join(f"{1000 * m:.1f}" for m in all_medians[b])
        rows.append([b, 1000 * med, 1000 * statistics.fmean(times), 1000 * p90, tps, f"{tps / base_tps:.1f}x",
                     util, prefill_steps, f"{ctx[0]}-{ctx[1]}", spread])

    print()
    print_table(["batch", "median ms/step", "mean ms/step", "p90 ms/step", "decode tok/s",
                 f"tok/s vs B={sizes[0]}", "cpu util", "prefill steps", "context range", "round medians ms"], rows)
    print()
    print("(figures from the round with the lowest median per B; cpu util = process CPU s / wall s over the")
    print(" timed steps, ~2 on an idle 2-core box; a lower value means other load or too little work per step.)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
