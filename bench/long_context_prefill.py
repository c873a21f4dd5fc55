"""Prefill time against prompt length, for the shapes a long-context probe could run on a CPU.

What it measures
----------------
For each shape and each prompt length (default 1k, 2k, 4k, 8k, 16k tokens): a fresh request of that many
tokens (random bytes after BOS, max_tokens 1, prefix caching off so nothing is reused) is run to its first token
with ``engine.generate``; the wall time is the prefill (chunked by max_num_batched_tokens, 512). The lengths are
interleaved over --rounds rounds (default 3) and the median per length is reported, with the growth of each
doubling (t(2n) / t(n): 2.0 is linear, 4.0 quadratic). Shapes, each with 32,768 positions:

- tiny-long: the preset targets/reference-long.yaml serves (a wide MLP, one 16-wide attention head);
- tiny@32k: tiny's own shape (4 heads of 16) with 32,768 positions, what a "tiny with a long context" would be.

Usage: python bench/long_context_prefill.py [--quick] [--sizes 1000,2000,4000,8000,16000] [--rounds 3]
"""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

from _common import base_parser, loadavg, now, print_table, random_prompt

from chaos.reference.config import EngineConfig, preset
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.engine.sequence import SamplingParams


def shapes() -> dict:
    return {"tiny-long": preset("tiny-long"), "tiny@32k": replace(preset("tiny"), max_position_embeddings=32768)}


def main() -> None:
    p = base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,2000,4000,8000,16000")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.quick:
        sizes, a.rounds = [s for s in sizes if s <= 4000], 2
    rng = random.Random(a.seed)
    print(f"== prefill vs prompt length ==  load average at start: {loadavg()}\n")
    results = {}
    for name, model in shapes().items():
        engine = LLMEngine(EngineConfig(model=model, kv_cache_memory_mb=64, enable_prefix_caching=False))
        engine.generate([random_prompt(rng, 64)], SamplingParams(max_tokens=1))  # warm-up
        times = {n: [] for n in sizes}
        for _ in range(a.rounds):
            for n in rng.sample(sizes, len(sizes)):
                t0 = now()
                engine.generate([random_prompt(rng, n)], SamplingParams(max_tokens=1))
                times[n].append(now() - t0)
        results[name] = {n: statistics.median(v) for n, v in times.items()}
        print(f"{name}: {model.num_parameters() / 1e6:.2f}M params, {model.num_attention_heads} heads x "
              f"{model.head_dim}, MLP {model.intermediate_size}")
    rows = []
    for i, n in enumerate(sizes):
        row = [n]
        for name in results:
            t = results[name][n]
            row += [t * 1000, None if i == 0 else t / results[name][sizes[i - 1]]]
        rows.append(row)
    print()
    print_table(["tokens"] + [h for name in results for h in (f"{name} ms", "x prev")], rows)
    print(f"\nx prev: growth over the previous length (2.0 linear, 4.0 quadratic for doubling lengths); "
          f"load average at end: {loadavg()}")


if __name__ == "__main__":
    main()
