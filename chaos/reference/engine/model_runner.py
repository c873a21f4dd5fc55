"""Owns the model and its KV cache; turns a scheduled batch into tensors, runs it, samples."""

from __future__ import annotations

import torch

from ..attention import AttentionMetadata, PrefillChunk
from ..config import EngineConfig
from ..loader import load_checkpoint
from ..model import CausalLM
from ..tokenizer import VOCAB_SIZE
from .sampler import Sampler
from .sequence import Sequence

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA GPU; use --device cpu or auto")
    return torch.device(name)


class ModelRunner:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        cfg = config.model
        model = CausalLM(cfg)
        if config.checkpoint:
            load_checkpoint(model, config.checkpoint)
        else:
            model.init_random(cfg.seed, cfg.init_std)
        self.model = model.to(device=self.device, dtype=self.dtype).eval().fuse()
        slots = config.num_kv_blocks * config.block_size
        shape = (2, slots, cfg.num_key_value_heads, cfg.head_dim)
        self.kv_caches = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                          for _ in range(cfg.num_hidden_layers)]
        self.sampler = Sampler(self.device, min(VOCAB_SIZE, cfg.vocab_size))

    def _slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        bs, table = self.config.block_size, seq.block_table
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def prepare(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[Sequence]]:
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        logits_indices: list[int] = []
        sampling: list[Sequence] = []
        decodes: list[tuple[int, Sequence]] = []
        prefills: list[tuple[int, Sequence]] = []
        for seq in seqs:
            start, n = seq.num_computed_tokens, seq.scheduled_tokens
            offset = len(input_ids)
            input_ids += seq.token_ids[start:start + n]
            positions += range(start, start + n)
            slot_mapping += self._slots(seq, start, start + n)
            if start + n == len(seq):
                logits_indices.append(offset + n - 1)
                sampling.append(seq)
            (decodes if n == 1 else prefills).append((offset, seq))

        dev = self.device
        bs = self.config.block_size
        long = dict(dtype=torch.long, device=dev)
        meta = AttentionMetadata(slot_mapping=torch.tensor(slot_mapping, **long),
                                 logits_indices=torch.tensor(logits_indices, **long), block_size=bs)
        if decodes:
            lens = [s.num_computed_tokens + 1 for _, s in decodes]
            max_blocks = -(-max(lens) // bs)
            tables = [s.block_table[:max_blocks] + [0] * (max_blocks - len(s.block_table[:max_blocks]))
                      for _, s in decodes]
            meta.decode_indices = torch.tensor([o for o, _ in decodes], **long)
            meta.decode_block_tables = torch.tensor(tables, **long)
            meta.decode_mask = (torch.arange(max_blocks * bs, device=dev).unsqueeze(0)
                                < torch.tensor(lens, **long).unsqueeze(1)).view(len(decodes), 1, 1, -1)
        for offset, s in prefills:
            start, n = s.num_computed_tokens, s.scheduled_tokens
            table = None if start == 0 else torch.tensor(s.block_table[:-(-(start + n) // bs)], **long)
            meta.prefills.append(PrefillChunk(offset, n, start + n, table))
        return (torch.tensor(input_ids, **long), torch.tensor(positions, **long), meta, sampling)

    @torch.inference_mode()
    def run(self, seqs: list[Sequence]) -> dict[str, int]:
        """Compute the scheduled tokens; return the next token of each sequence that reached its end."""
        input_ids, positions, meta, sampling = self.prepare(seqs)
        hidden = self.model(input_ids, positions, self.kv_caches, meta)
        if not sampling:
            return {}
        ids = self.sampler(self.model.compute_logits(hidden), sampling)
        return {s.request_id: t for s, t in zip(sampling, ids)}
