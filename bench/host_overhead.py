"""Host time of one engine step, and how close a whole step comes to the bare batched forward pass.

What it measures
----------------
1. Host time per step. On a GPU the host's share of a step (scheduling, packing the inputs, sampling
bookkeeping, turning tokens into outputs) runs while the GPU waits, so it caps tokens/s however fast
the kernels are. This part makes the model's arithmetic negligible (one layer, hidden size 16) and
times whole ``engine.step()`` calls on the CPU: B requests (prompts of --prompt-len tokens, 16 by
default) are added and prefilled, then --steps decode steps (default 100) are timed with
perf_counter, for B = 1, 32 and 256, greedy (temperature 0) and sampled (temperature 0.6, as
nano-vllm's bench). On a CPU the sampled rows' softmax and draw run on the CPU too; on a GPU they
are device kernels. Reported: the median ms per step and microseconds per sequence per step; the
ratio column compares each B with B=1 per sequence (how well the per-step costs amortise).

2. Engine step against the bare batched forward (same shapes). On the --preset model (small by
default, as benchmarks 1 and 3), --streams requests (default 32; prompts of --fwd-prompt-len tokens,
default 64, greedy, ignore_eos) are prefilled, then every decode step is timed twice, side by side:
the whole ``engine.step()`` (schedule, prepare the inputs, forward, logits, sample, outputs), and
right after it the bare forward: the model called directly, up to the logits, with the very tensors
that step prepared (the same 32 tokens, positions, slots, block tables and KV cache; no scheduler,
no block manager, no sampling, no per-sequence Python). Replaying a step's inputs rewrites the same
K/V values into the same slots, so the engine's state is unchanged. --fwd-rounds rounds (default
3) of --fwd-warm untimed + --fwd-steps timed steps (default 4 + 48), fresh requests each round.
Reported per round: the median ms of each; what the engine adds to the forward (the median of the
per-step differences); efficiency = bare forward / engine step, as the median of the per-step ratios
(each step against its own replay, so load that comes and goes on a shared box hits both alike) and
as the ratio of the two medians. The aim is >= 80 %, judged on the median round's per-step efficiency.

Usage: python bench/host_overhead.py [--quick] [--part host|forward|all] [--steps 100] [--prompt-len 16]
                                     [--preset small] [--streams 32] [--fwd-steps 48] [--fwd-rounds 3]
"""

from __future__ import annotations

import random
import sys
import time

import torch

from _common import (Stopwatch, base_parser, loadavg, make_engine, median, now, print_header, print_table,
                     random_prompt, start_decoding)

from chaos.reference.config import EngineConfig, ModelConfig
from chaos.reference.engine.llm_engine import LLMEngine
from chaos.reference.engine.sequence import SamplingParams

MODES = {"greedy": dict(temperature=0.0), "sampled": dict(temperature=0.6)}
EFFICIENCY_AIM = 0.80


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


def host_part(args) -> None:
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


class StepInputs:
    """Keeps the tensors the engine's runner prepares for each step, so the bench can replay them bare."""

    def __init__(self, runner):
        self.runner, self.prepare, self.last = runner, runner.prepare, None
        runner.prepare = self  # an instance attribute shadows the method: one extra call per step

    def __call__(self, seqs):
        self.last = self.prepare(seqs)
        return self.last


@torch.inference_mode()  # as ModelRunner.run
def bare_forward(runner, ids, positions, meta) -> torch.Tensor:
    logits = runner.model.compute_logits(runner.model(ids, positions, runner.kv_caches, meta))
    if runner.device.type == "cuda":
        torch.cuda.synchronize()  # the engine's step waits for its sampled ids; the bare pass must wait too
    return logits


def forward_round(engine, inputs: StepInputs, rng, streams: int, prompt_len: int, warm: int, steps: int, tag: str):
    """Per step (engine.step seconds, bare forward seconds), the context range, and the CPU utilisation."""
    params = SamplingParams(temperature=0.0, max_tokens=warm + steps + 8, ignore_eos=True)
    rids, seqs, _ = start_decoding(engine, [random_prompt(rng, prompt_len) for _ in range(streams)], params, tag)
    runner = engine.model_runner
    pairs = []
    for i in range(warm + steps):
        if i == warm:
            ctx_lo = min(s.num_computed_tokens for s in seqs) + 1  # positions the first timed step attends to
            sw = Stopwatch()
        t0 = now()
        outs = engine.step()
        t1 = now()
        ids, positions, meta, sampling = inputs.last
        if len(outs) != streams or len(sampling) != streams or ids.shape[0] != streams:
            raise RuntimeError(f"step {i}: expected a pure decode of {streams} streams, got {len(outs)} outputs")
        t2 = now()
        bare_forward(runner, ids, positions, meta)
        t3 = now()
        if i >= warm:
            pairs.append((t1 - t0, t3 - t2))
    sw.stop()
    ctx = (ctx_lo, max(s.num_computed_tokens for s in seqs))
    for rid in rids:
        engine.abort_request(rid)
    return pairs, ctx, sw.cpu_util


def forward_part(args, threads: int) -> bool:
    streams = args.streams
    steps = args.fwd_steps or (8 if args.quick else 48)
    warm = args.fwd_warm if args.fwd_warm is not None else (2 if args.quick else 4)
    rounds = args.fwd_rounds or (1 if args.quick else 3)
    # torch's thread count is process-wide and the host part pins it to 1: the real model gets the default back.
    engine = make_engine(args.preset, max_num_seqs=max(64, streams), dtype=args.dtype, num_threads=threads)
    inputs = StepInputs(engine.model_runner)
    print_header(f"engine step vs bare batched forward (decode, {streams} streams, same shapes)", args, engine)
    print(f"{streams} streams, prompt {args.fwd_prompt_len} tokens, greedy; per round {warm} untimed + {steps} "
          f"timed decode steps, each step timed whole and then its own inputs replayed through the bare forward "
          f"(model + logits); {rounds} round(s)")
    rng = random.Random(args.seed)
    forward_round(engine, inputs, rng, 4, args.fwd_prompt_len, 2, 2, "warm")  # first-call costs, both paths
    rows, effs, ratio_of_medians = [], [], []
    for r in range(rounds):
        pairs, ctx, util = forward_round(engine, inputs, rng, streams, args.fwd_prompt_len, warm, steps, f"r{r}")
        step = median([p[0] for p in pairs])
        bare = median([p[1] for p in pairs])
        # Paired per step (each step against its own replay), so load that comes and goes hits both alike.
        effs.append(median([b / s for s, b in pairs]))
        ratio_of_medians.append(bare / step)
        rows.append([r + 1, f"{ctx[0]}-{ctx[1]}", 1000 * step, 1000 * bare,
                     f"{1000 * median([s - b for s, b in pairs]):.2f}", f"{100 * effs[-1]:.1f} %",
                     f"{100 * ratio_of_medians[-1]:.1f} %", util])
    print()
    print_table(["round", "context", "engine step ms", "bare forward ms", "engine adds ms", "efficiency",
                 "ratio of medians", "cpu util"], rows)
    eff = median(effs)
    met = eff >= EFFICIENCY_AIM
    print()
    print(f"efficiency = bare forward / engine step: {100 * eff:.1f} % (median round; per round the median of "
          f"per-step ratios), {100 * max(effs):.1f} % best round; "
          f"ratio of medians {100 * median(ratio_of_medians):.1f} %")
    print(f"aim >= {100 * EFFICIENCY_AIM:.0f} %: {'MET' if met else 'MISSED'} ({100 * eff:.1f} %)")
    print("(engine adds = median of per-step differences; cpu util = process CPU s / wall s over the timed steps,")
    print(f" ~2 on an idle 2-core box, lower when other load took the cores. Load average at end: {loadavg()})")
    return met


def main(argv=None) -> int:
    p = base_parser(__doc__.split("\n")[0])
    p.add_argument("--part", choices=["host", "forward", "all"], default="all",
                   help="host: the negligible-model table; forward: engine step vs bare forward; all: both")
    p.add_argument("--steps", type=int, default=100, help="host part: timed steps per row")
    p.add_argument("--prompt-len", type=int, default=16, help="host part: prompt tokens")
    p.add_argument("--streams", type=int, default=32, help="forward part: concurrent decodes (default 32)")
    p.add_argument("--fwd-prompt-len", type=int, default=64, help="forward part: prompt tokens (default 64)")
    p.add_argument("--fwd-steps", type=int, default=None, help="forward part: timed steps a round (default 48)")
    p.add_argument("--fwd-warm", type=int, default=None, help="forward part: untimed steps a round (default 4)")
    p.add_argument("--fwd-rounds", type=int, default=None, help="forward part: rounds (default 3)")
    args = p.parse_args(argv)
    threads = torch.get_num_threads()  # torch's default, before the host part sets 1
    if args.part in ("host", "all"):
        host_part(args)
    if args.part in ("forward", "all"):
        if args.part == "all":
            print()
        forward_part(args, threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
