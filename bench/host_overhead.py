"""Host time of one engine step: what the CPU spends per step outside the model's arithmetic.

What it measures
----------------
On a GPU the host's share of a step (scheduling, packing the inputs, sampling bookkeeping, turning
tokens into outputs) runs while the GPU waits, so it caps tokens/s however fast the kernels are.
This script makes the model's arithmetic negligible (one layer, hidden size 16) and times whole
``engine.step()`` calls on the CPU: B requests (prompts of --prompt-len tokens, 16 by default) are
added and prefilled, then --steps decode steps (default 100) are timed with perf_counter, for
B = 1, 32 and 256, greedy (temperature 0) and sampled (temperature 0.6, as nano-vllm's bench). On a
CPU the sampled rows' softmax and draw run on the CPU too; on a GPU they are device kernels. Reported: the
median ms per step and microseconds per sequence per step; the ratio column compares each B with
B=1 per sequence (how well the per-step costs amortise).

Usage: python bench/host_overhead.py [--quick] [--steps 100] [--prompt-len 16]
"""

from __future__ import annotations

import random
import time

from _common import base_parser, median, print_table, random_prompt, start_decoding

from chaos.reference.config import EngineConfig, ModelConfig
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.engine.sequence import SamplingParams

MODES = {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.6)}


def measure(batch: int, mode: str, prompt_len: int, steps: int, seed: int) -> float:
    model = ModelConfig(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1,
                        num_key_value_heads=1)
    engine = LLMEngine(EngineConfig(model=model, max_model_len=1024, max_num_seqs=256,
                                    max_num_batched_tokens=16384, num_threads=1))
    rng = random.Random(seed)
    params = SamplingParams(ignore_eos=True, max_tokens=steps + 10, **MODES[mode])
    start_decoding(engine, [random_prompt(rng, prompt_len) for _ in range(batch)], params, mode)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
    return median(times)


def main() -> None:
    p = base_parser(__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--prompt-len", type=int, default=16)
    args = p.parse_args()
    steps = 20 if args.quick else args.steps
    print("== host time per engine step (model arithmetic made negligible) ==")
    rows = []
    for mode in MODES:
        base = None
        for batch in (1, 32, 256):
            s = measure(batch, mode, args.prompt_len, steps, args.seed)
            per_seq = s / batch * 1e6
            base = base or per_seq
            rows.append([mode, batch, f"{s * 1e3:.2f}", f"{per_seq:.1f}", f"{base / per_seq:.1f}x"])
    print_table(["sampling", "batch", "median ms/step", "us per sequence", "per-seq vs B=1"], rows)


if __name__ == "__main__":
    main()
