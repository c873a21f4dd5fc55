"""Shared helpers for the benchmark scripts in this folder (not a benchmark itself).

The scripts are run as ``python bench/NAME.py``, which puts this folder on sys.path,
so they import this module as ``_common``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import string
import time

import torch

from chaos.reference.config import PRESETS, EngineConfig, preset
from chaos.reference.engine.llm_engine import LLMEngine

from _table import print_table  # noqa: F401 - re-exported for the scripts

_ALPHABET = string.ascii_lowercase + "      ,."


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke-test size: fewer repetitions and tokens (well under 30 s)")
    p.add_argument("--preset", default="small", choices=sorted(PRESETS),
                   help="model preset (default: small, ~22M parameters)")
    p.add_argument("--seed", type=int, default=1234, help="seed for the synthetic prompts")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="engine dtype (bfloat16 uses AMX where the CPU has it, but greedy output is then "
                        "no longer independent of the batch)")
    return p


def make_engine(preset_name: str, **overrides) -> LLMEngine:
    return LLMEngine(EngineConfig(model=preset(preset_name), **overrides))


def random_prompt(rng: random.Random, num_tokens: int) -> list[int]:
    """Exactly num_tokens ids: BOS followed by num_tokens - 1 ASCII bytes (byte tokenizer)."""
    if num_tokens < 1:
        raise ValueError("num_tokens must be >= 1")
    from chaos.reference.tokenizer import BOS
    return [BOS] + [ord(rng.choice(_ALPHABET)) for _ in range(num_tokens - 1)]


def random_bytes(rng: random.Random, num_tokens: int) -> list[int]:
    """num_tokens ASCII byte ids, no BOS (for suffixes)."""
    return [ord(rng.choice(_ALPHABET)) for _ in range(num_tokens)]


def start_decoding(engine: LLMEngine, prompts: list[list[int]], params, tag: str) -> tuple[list[str], list, int]:
    """Add one request per prompt and step until every one has sampled its first token, so that each
    following step is a pure decode of all of them. Returns their request ids, their sequences and the
    number of steps that took."""
    rids = [f"{tag}-{i}" for i in range(len(prompts))]
    for rid, prompt in zip(rids, prompts):
        engine.add_request(rid, prompt, params)
    seqs = [engine.seqs[r] for r in rids]
    steps = 0
    while engine.scheduler.waiting or any(s.num_output_tokens == 0 for s in seqs):
        engine.step()
        steps += 1
    return rids, seqs, steps


def now() -> float:
    return time.perf_counter()


class Stopwatch:
    """Wall time (perf_counter) plus this process's CPU time over the same interval.

    cpu_util = CPU seconds / wall seconds. With torch's default of one thread per core it
    sits near the core count on an idle machine (about 2.0 on 2 cores, less when the work
    is too small to keep both threads busy); a marked drop in a repeated measurement means
    other processes were taking the cores.
    """

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        self.wall = self.cpu = None

    def stop(self) -> "Stopwatch":
        self.wall = time.perf_counter() - self.wall0
        self.cpu = time.process_time() - self.cpu0
        return self

    @property
    def cpu_util(self) -> float:
        return self.cpu / self.wall if self.wall else 0.0


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def median(xs):
    return statistics.median(xs)


def print_header(title: str, args, engine: LLMEngine | None = None) -> None:
    print(f"== {title} ==")
    print(f"host: {platform.node()}  cpus: {os.cpu_count()}  torch {torch.__version__}  "
          f"threads: {torch.get_num_threads()}  python {platform.python_version()}")
    if engine is not None:
        cfg = engine.config
        m = cfg.model
        print(f"preset: {args.preset} ({m.num_parameters() / 1e6:.1f}M params, {m.num_hidden_layers} layers, "
              f"hidden {m.hidden_size})  dtype {cfg.dtype}  device {cfg.device}  "
              f"max_num_batched_tokens {cfg.max_num_batched_tokens}  max_num_seqs {cfg.max_num_seqs}  "
              f"kv blocks {cfg.num_kv_blocks}x{cfg.block_size}  prefix caching {cfg.enable_prefix_caching}")
    print(f"mode: {'quick' if args.quick else 'default'}  load average at start: {loadavg()}")
    print()


