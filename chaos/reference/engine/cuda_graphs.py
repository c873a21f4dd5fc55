"""Decode steps replayed from CUDA graphs, one graph per batch-size bucket.

A decode step of a small model is a few hundred small kernels; launched one at a time
from Python, the GPU spends most of the step waiting for the CPU. Capturing the decode
forward once per bucket and replaying it makes the whole step one launch.

A graph replays fixed addresses and shapes, so its inputs live in static buffers sized
for the largest bucket. A batch is copied in and padded up to its bucket: padded rows
write their K/V into a scratch block that no sequence owns and attend only to it. The
attention kernel's shapes do not depend on context length (triton_attention.py), so one
graph per batch size serves every step. Steps with a prefill chunk run eagerly.

With capture=False the same buffers and padding run eagerly; the tests use that on CPU.
"""

from __future__ import annotations

import torch

from ..attention import AttentionMetadata
from ..model import CausalLM


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every 16 up to max_batch (and max_batch itself)."""
    buckets = [b for b in (1, 2, 4, 8) if b <= max_batch] + list(range(16, max_batch + 1, 16))
    if buckets[-1] != max_batch:
        buckets.append(max_batch)
    return buckets


class DecodeGraphs:
    def __init__(self, model: CausalLM, kv_caches: list[torch.Tensor], *, max_batch: int, max_blocks: int,
                 block_size: int, scratch_block: int, decode_kernel: str, capture: bool):
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.decode_kernel = decode_kernel
        self.buckets = batch_buckets(max_batch)
        dev = kv_caches[0].device
        long = dict(dtype=torch.long, device=dev)
        self.input_ids = torch.zeros(max_batch, **long)
        self.positions = torch.zeros(max_batch, **long)
        self.slot_mapping = torch.zeros(max_batch, **long)
        self.context_lens = torch.zeros(max_batch, **long)
        self.block_tables = torch.zeros(max_batch, max_blocks, **long)
        self.hidden = torch.zeros(max_batch, model.config.hidden_size, device=dev, dtype=kv_caches[0].dtype)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.num_steps = 0  # decode steps run through these buffers (replayed, when captured)
        if capture:
            self._capture()

    @property
    def max_batch(self) -> int:
        return self.buckets[-1]

    def bucket(self, batch: int) -> int:
        return next(b for b in self.buckets if b >= batch)

    def can_run(self, meta: AttentionMetadata, batch: int) -> bool:
        """A decode-only step (decodes with no decode_indices: every row is one) that fits the largest bucket."""
        return meta.decode_block_tables is not None and meta.decode_indices is None and batch <= self.max_batch

    @torch.inference_mode()
    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [batch, hidden] for a step can_run accepted."""
        b, g = input_ids.shape[0], self.bucket(input_ids.shape[0])
        self.input_ids[:b].copy_(input_ids)
        self.positions[:b].copy_(positions)
        self.slot_mapping[:b].copy_(meta.slot_mapping)
        self.context_lens[:b].copy_(meta.decode_context_lens)
        self.block_tables[:b, :meta.decode_block_tables.shape[1]].copy_(meta.decode_block_tables)
        self._pad(b, g)
        self.num_steps += 1
        graph = self.graphs.get(g)
        if graph is not None:
            graph.replay()
        else:
            self.hidden[:g] = self._forward(g)
        return self.hidden[:b]

    def _pad(self, start: int, end: int) -> None:
        if start < end:
            self.input_ids[start:end] = 0
            self.positions[start:end] = 0
            self.slot_mapping[start:end] = self.scratch_block * self.block_size
            self.context_lens[start:end] = 1
            self.block_tables[start:end, 0] = self.scratch_block

    def _forward(self, g: int) -> torch.Tensor:
        meta = AttentionMetadata(slot_mapping=self.slot_mapping[:g], logits_indices=None,
                                 decode_block_tables=self.block_tables[:g], decode_context_lens=self.context_lens[:g],
                                 block_size=self.block_size, decode_kernel=self.decode_kernel)
        return self.model(self.input_ids[:g], self.positions[:g], self.kv_caches, meta)

    @torch.inference_mode()
    def _capture(self) -> None:
        pool = None
        for g in reversed(self.buckets):  # largest first, so the smaller ones fit in its memory pool
            self._pad(0, g)
            self.hidden[:g] = self._forward(g)  # warm-up: compiles kernels, sizes the allocator's blocks
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.hidden[:g] = self._forward(g)
            pool = graph.pool() if pool is None else pool
            self.graphs[g] = graph
        torch.cuda.synchronize()
