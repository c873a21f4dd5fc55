"""Model presets and engine settings, validated where they are made."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace

from .builds import BuildChanges


@dataclass(slots=True)
class ModelConfig:
    """Shape of a Llama/Qwen-style decoder. Field names follow HF config.json."""

    vocab_size: int = 260
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    max_position_embeddings: int = 1024
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    qk_norm: bool = False  # Qwen3 normalises q and k per head
    tie_word_embeddings: bool = False
    init_std: float = 0.08  # random weights; wide enough that greedy has clear winners
    seed: int = 0

    def __post_init__(self):
        if self.head_dim == 0:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError("hidden_size must be a multiple of num_attention_heads")
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for rotary embeddings")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")

    def num_parameters(self) -> int:
        h, q, kv = self.hidden_size, self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        per_layer = h * q * 2 + h * kv * 2 + 3 * h * self.intermediate_size + 2 * h
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * per_layer + embed + h

    @classmethod
    def from_hf_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known and v is not None}
        if d.get("model_type") == "qwen3" or "q_norm" in str(d.get("architectures", "")):
            kwargs.setdefault("qk_norm", True)
        return cls(**kwargs)

    @classmethod
    def from_checkpoint(cls, path: str) -> "ModelConfig":
        with open(os.path.join(path, "config.json")) as f:
            return cls.from_hf_dict(json.load(f))

    def to_hf_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["model_type"] = "qwen3" if self.qk_norm else "llama"
        return d


PRESETS: dict[str, ModelConfig] = {
    # For tests: a forward pass costs well under a millisecond.
    "tiny": ModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024),
    # For long-context probes on a CPU (experiments/long-context.yaml): 32k positions, ~1.7M parameters,
    # shaped so that prefill costs mostly per token, as a real model's does at these lengths: a wide MLP and
    # one 16-wide attention head. tiny's shape with more positions would spend a 16k prefill mostly in
    # attention (3.5x per doubling of the prompt, measured); this one prefills 16k tokens in ~1.7 s on 2 cores.
    "tiny-long": ModelConfig(hidden_size=128, intermediate_size=2048, num_hidden_layers=2,
                             num_attention_heads=1, num_key_value_heads=1, head_dim=16,
                             max_position_embeddings=32768),
    # For demos and experiments: ~22M parameters, 8k context (enough for the seed's 3k-token RAG case
    # and for long-context probes that must fail cleanly past 8k).
    "small": ModelConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=8192,
                         init_std=0.04),
    # Shaped like Qwen3-0.6B (random weights). Its 151,936-entry head is kept for a realistic cost;
    # ids the byte tokenizer cannot emit are masked at sampling.
    "qwen3-0.6b": ModelConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                              num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                              head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                              qk_norm=True, tie_word_embeddings=True, init_std=0.02),
}
DEFAULT_PRESET = "small"


def preset(name: str) -> ModelConfig:
    try:
        return replace(PRESETS[name])
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


@dataclass(slots=True)
class EngineConfig:
    """How the engine schedules and how much KV cache it owns."""

    model: ModelConfig = field(default_factory=lambda: preset(DEFAULT_PRESET))
    max_model_len: int = 0  # 0: the model's max_position_embeddings
    block_size: int = 16
    num_kv_blocks: int = 0  # 0: enough for max_num_seqs full-length... capped by kv_cache_memory_mb
    kv_cache_memory_mb: int = 512
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 512  # per step: long prompts are prefilled in chunks of at most this
    enable_prefix_caching: bool = True
    device: str = "cpu"
    dtype: str = "float32"
    num_threads: int = 0  # torch intra-op threads; 0 leaves torch's default
    checkpoint: str | None = None
    decode_kernel: str = "auto"  # torch | triton | auto (triton on CUDA when it imports, else torch)
    enforce_eager: bool = False  # never replay decode steps from CUDA graphs (CUDA only; see engine/cuda_graphs.py)
    # Every step takes this factor of its own compute time: a build that is slower for real, for the gate's
    # demonstrations (the step_slowdown fault hook does the same for a while; its revert returns to this).
    step_slowdown: float = 1.0
    build: BuildChanges = field(default_factory=BuildChanges)  # stalls, pace spread, rare errors (builds.py)

    def __post_init__(self):
        if self.max_model_len == 0:
            self.max_model_len = self.model.max_position_embeddings
        if self.max_model_len > self.model.max_position_embeddings:
            raise ValueError(f"max_model_len {self.max_model_len} exceeds the model's "
                             f"max_position_embeddings {self.model.max_position_embeddings}")
        if self.block_size < 1 or self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.decode_kernel not in ("auto", "torch", "triton"):
            raise ValueError(f"decode_kernel must be auto, torch or triton, not {self.decode_kernel!r}")
        if not 1.0 <= self.step_slowdown <= 10.0:
            raise ValueError(f"step_slowdown must be in [1, 10], not {self.step_slowdown!r}")
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, not {self.dtype!r}")
        if self.num_kv_blocks == 0:
            m = self.model
            bytes_per_block = (2 * m.num_hidden_layers * self.block_size * m.num_key_value_heads
                               * m.head_dim * (4 if self.dtype == "float32" else 2))
            by_memory = self.kv_cache_memory_mb * 2**20 // bytes_per_block
            wanted = self.max_num_seqs * -(-self.max_model_len // self.block_size)
            self.num_kv_blocks = max(1, min(by_memory, wanted))
        # A single request must always fit, or preemption could never make progress.
        if self.num_kv_blocks * self.block_size < self.block_size + 1:
            raise ValueError("num_kv_blocks too small to hold any request")
