"""The CUDA path on a GPU: correctness against the CPU, and throughput, in one prepared run.

Sections (each prints its table when it ends and is saved to --json then, so a failure in a
later one keeps what came before):

1. kernel: the Triton paged-decode kernel against the torch gather path, on the GPU, with
   Qwen3-0.6B's head shapes (16 query heads, 8 KV heads, head_dim 128, blocks of 16):
   max |difference| in float32 and bfloat16, and the time of each for 256 sequences of
   ~1,000 positions (the ratio is the kernel's speed-up over the gather).
2. tiny greedy: the tiny preset in float32, 16 prompts x 64 greedy tokens, on the CPU and
   on the GPU (Triton kernel + CUDA graphs): how many sequences are token-for-token equal,
   where any first diverges, and the max |logit difference| of one 200-token prefill.
3. nano-vllm shape: the qwen3-0.6b preset (random weights, bfloat16), 256 sequences with
   input and output lengths uniform in 100-1024 (seeded), temperature 0.6, ignore_eos, as
   nano-vllm's bench.py; output tokens / wall seconds, with CUDA graphs and eager side by side.
4. batch sweep: decode tokens/s at batch 1, 32 and 256 on the same engine (prompts of 128
   tokens, 64 timed decode steps), for CUDA graphs + Triton, eager + Triton, eager + torch.

Usage:
    python bench/gpu.py [--json PATH]          # on a CUDA machine (a few minutes on an H200)
    python bench/gpu.py --smoke [--device cpu] # tiny sizes: checks the script itself, anywhere
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo, not an install
from _common import median, print_table, random_bytes, random_prompt, start_decoding  # noqa: E402

from chaos.reference.attention import AttentionMetadata, PrefillChunk  # noqa: E402
from chaos.reference.config import EngineConfig, preset  # noqa: E402
from chaos.reference.engine.llm_engine import LLMEngine  # noqa: E402
from chaos.reference.engine.sequence import SamplingParams  # noqa: E402

RESULTS: dict = {}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeat=20) -> float:
    """Median seconds of fn() over repeat calls after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return median(times)


def free() -> None:
    """Return the memory of engines the caller has dropped to the GPU."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- 1 ------------------------------------------------------------------------------------------
def kernel_check(args, device) -> dict:
    from chaos.reference.triton_attention import DecodeCase

    heads, kv_heads, head_dim, bs = 16, 8, 128, 16
    batch, max_len = (8, 100) if args.smoke else (256, 1024)
    rng = random.Random(0)
    lens = [rng.randint(max_len // 2, max_len) for _ in range(batch)]
    result = {}
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        case = DecodeCase(lens, heads, kv_heads, head_dim, bs, device=device, dtype=dtype)
        err = case.max_diff()
        t_kernel = timed(case.kernel, device)
        t_gather = timed(case.gather, device)
        name = str(dtype).removeprefix("torch.")
        result[name] = {"max_abs_diff": err, "kernel_us": t_kernel * 1e6, "torch_gather_us": t_gather * 1e6,
                        "speedup": t_gather / t_kernel}
        rows.append([name, f"{err:.2e}", f"{t_kernel * 1e6:.1f}", f"{t_gather * 1e6:.1f}",
                     f"{t_gather / t_kernel:.2f}x"])
        del case
    print(f"paged decode, {batch} sequences, contexts {min(lens)}-{max(lens)} positions, "
          f"{heads} heads / {kv_heads} KV heads x {head_dim}:")
    print_table(["dtype", "max |diff| vs fp32 torch", "triton us", "torch gather us", "ratio"], rows)
    return result


# -- 2 ------------------------------------------------------------------------------------------
def tiny_greedy(args, device) -> dict:
    rng = random.Random(7)
    prompts = [random_prompt(rng, rng.randrange(11, 201)) for _ in range(16)]
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)

    def engine(dev):
        return LLMEngine(EngineConfig(model=preset("tiny"), device=dev, max_model_len=1024, max_num_seqs=16))

    cpu, gpu = engine("cpu"), engine(str(device))
    want = [o.token_ids for o in cpu.generate(prompts, params)]
    got = [o.token_ids for o in gpu.generate(prompts, params)]
    divergences = [next(i for i, (a, b) in enumerate(zip(x, y)) if a != b) for x, y in zip(want, got) if x != y]

    def prefill_logits(e):
        r = e.model_runner
        p = prompts[0] + prompts[1][:200 - len(prompts[0])] if len(prompts[0]) < 200 else prompts[0][:200]
        n = len(p)
        long = dict(dtype=torch.long, device=r.device)
        meta = AttentionMetadata(slot_mapping=torch.arange(n, **long), logits_indices=None,
                                 prefills=[PrefillChunk(0, n, n, None)])
        with torch.inference_mode():
            hidden = r.model(torch.tensor(p, **long), torch.arange(n, **long), r.kv_caches, meta)
            return r.model.compute_logits(hidden).float().cpu()

    logit_diff = (prefill_logits(cpu) - prefill_logits(gpu)).abs().max().item()
    graphs = gpu.model_runner.graphs
    result = {"sequences": len(prompts), "identical": len(prompts) - len(divergences),
              "first_divergence_at": divergences, "max_abs_logit_diff_prefill": logit_diff,
              "gpu_decode_kernel": gpu.model_runner.decode_kernel,
              "gpu_graph_steps": graphs.num_steps if graphs else 0, "gpu_steps": gpu.num_steps}
    print_table(["sequences", "identical", "first divergence at", "max |logit diff|", "kernel", "graph steps"],
                [[len(prompts), result["identical"], divergences or "-", f"{logit_diff:.2e}",
                  result["gpu_decode_kernel"], f"{result['gpu_graph_steps']}/{gpu.num_steps}"]])
    del cpu, gpu
    free()
    return result


# -- 3 ------------------------------------------------------------------------------------------
def big_engine(args, device) -> LLMEngine:
    name = "tiny" if args.smoke else "qwen3-0.6b"
    t = time.perf_counter()
    e = LLMEngine(EngineConfig(
        model=preset(name), device=str(device), dtype="float32" if args.smoke else "bfloat16",
        max_model_len=1024 if args.smoke else 2048, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=16384, enable_prefix_caching=False,  # repeated runs must not hit a warm cache
        kv_cache_memory_mb=256 if args.smoke else 64 * 1024))
    sync(device)
    graphs = e.model_runner.graphs
    print(f"engine: {name}, {e.config.model.num_parameters() / 1e6:.0f}M params, {e.config.dtype}, "
          f"{e.config.num_kv_blocks} KV blocks, kernel {e.model_runner.decode_kernel}, "
          f"{len(graphs.graphs) if graphs else 0} CUDA graphs, built in {time.perf_counter() - t:.1f} s")
    return e


def set_mode(e: LLMEngine, mode: str, graphs) -> None:
    """Switch one engine (same weights, same cache) between graphs/eager and the two decode kernels."""
    runner = e.model_runner
    runner.graphs = graphs if mode.startswith("cuda-graphs") else None
    runner.decode_kernel = mode.partition("+")[2]


def modes(e: LLMEngine) -> list[str]:
    """What this engine can run: all three modes when it captured graphs, else what it has."""
    if e.model_runner.graphs is not None:
        return ["cuda-graphs+triton", "eager+triton", "eager+torch"]
    return ["eager+" + k for k in dict.fromkeys([e.model_runner.decode_kernel, "torch"])]


def nano_vllm_shape(args, device, e: LLMEngine) -> dict:
    n, lo, hi = (16, 10, 60) if args.smoke else (256, 100, 1024)
    rng = random.Random(0)
    prompts = [random_bytes(rng, rng.randint(lo, hi)) for _ in range(n)]
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=rng.randint(lo, hi)) for _ in range(n)]
    graphs, all_modes = e.model_runner.graphs, modes(e)
    # Warm-up, long enough for steps that mix prefill chunks with decodes (they run the kernel eagerly, which
    # compiles it once more), so no compilation falls inside a timed run.
    e.generate([random_bytes(rng, hi) for _ in range(40)],
               SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=4))
    result, rows = {}, []
    for mode in all_modes[:2]:
        set_mode(e, mode, graphs)
        sync(device)
        steps0 = e.num_steps
        t = time.perf_counter()
        outs = e.generate(prompts, params)
        sync(device)
        wall = time.perf_counter() - t
        tokens = sum(len(o.token_ids) for o in outs)
        result[mode] = {"output_tokens": tokens, "seconds": wall, "tok_per_s": tokens / wall,
                        "steps": e.num_steps - steps0}
        rows.append([mode, n, sum(map(len, prompts)), tokens, e.num_steps - steps0, f"{wall:.2f}",
                     f"{tokens / wall:,.0f}"])
    set_mode(e, all_modes[0], graphs)
    print_table(["mode", "seqs", "input tokens", "output tokens", "steps", "wall s", "output tok/s"], rows)
    if len(result) == 2:
        a, b = result.values()
        print(f"ratio cuda graphs / eager: {a['tok_per_s'] / b['tok_per_s']:.2f}x")
    best = max(r["tok_per_s"] for r in result.values())
    if args.smoke:
        print("(smoke sizes: checks the script, measures nothing)")
    else:
        print(f"aim >= 15,000 output tok/s on an H200: {'MET' if best >= 15000 else 'MISSED'} ({best:,.0f})")
    return result


# -- 4 ------------------------------------------------------------------------------------------
def batch_sweep(args, device, e: LLMEngine) -> dict:
    prompt_len, steps = (16, 8) if args.smoke else (128, 64)
    batches = [b for b in (1, 32, 256) if b <= e.config.max_num_seqs]
    graphs, all_modes = e.model_runner.graphs, modes(e)
    rng = random.Random(1)
    result, rows = {}, []
    for b in batches:
        for mode in all_modes:
            set_mode(e, mode, graphs)
            rids, _, _ = start_decoding(e, [random_bytes(rng, prompt_len) for _ in range(b)],
                                        SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=steps + 8),
                                        f"sweep-{b}-{mode}")
            times = []
            for _ in range(steps):
                t = time.perf_counter()
                e.step()  # ends with the sampled ids copied to the host: a synchronised step
                times.append(time.perf_counter() - t)
            for rid in rids:
                e.abort_request(rid)
            ms = median(times) * 1e3
            result.setdefault(str(b), {})[mode] = {"median_step_ms": ms, "tok_per_s": b * 1e3 / ms}
            rows.append([b, mode, f"{ms:.2f}", f"{b * 1e3 / ms:,.0f}"])
    set_mode(e, all_modes[0], graphs)
    print_table(["batch", "mode", "median ms/step", "decode tok/s"], rows)
    return result


SECTIONS = {"kernel": kernel_check, "tiny-greedy": tiny_greedy, "nano-vllm": nano_vllm_shape,
            "batch-sweep": batch_sweep}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the results here as they come")
    p.add_argument("--smoke", action="store_true", help="tiny sizes; runs on CPU too")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--only", help="comma-separated sections: " + ", ".join(SECTIONS))
    args = p.parse_args()
    device = torch.device(args.device)
    if args.smoke:
        args.max_num_seqs = min(args.max_num_seqs, 32)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    RESULTS["env"] = {"device": gpu_name, "torch": torch.__version__, "triton": triton_version,
                      "python": platform.python_version(), "smoke": args.smoke}
    print(f"== CUDA path: {gpu_name}, torch {torch.__version__}, triton {triton_version}"
          f"{', SMOKE sizes' if args.smoke else ''} ==")
    failed = False
    engine = None
    for name in wanted:
        print(f"\n-- {name} --")
        t = time.perf_counter()
        try:
            if name in ("kernel", "tiny-greedy") and device.type != "cuda" and not args.smoke:
                raise RuntimeError("needs a CUDA device")
            if name == "kernel" and triton_version is None:
                raise RuntimeError("triton does not import")
            skip = None
            if name == "tiny-greedy" and device.type != "cuda":
                skip = "compares the CPU with a CUDA device"
            if name == "kernel" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
                skip = "needs a CUDA device, or TRITON_INTERPRET=1 on CPU"
            if skip:
                RESULTS[name] = {"skipped": skip}
                print(f"skipped: {skip}")
                continue
            if name in ("nano-vllm", "batch-sweep"):
                engine = engine or big_engine(args, device)
                RESULTS[name] = SECTIONS[name](args, device, engine)
            else:
                RESULTS[name] = SECTIONS[name](args, device)
        except Exception as exc:  # keep going: the other sections still tell something
            failed = True
            traceback.print_exc()
            RESULTS[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"({name}: {time.perf_counter() - t:.1f} s)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(RESULTS, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
