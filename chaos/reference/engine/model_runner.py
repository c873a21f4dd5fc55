"""Owns the model and its KV cache; turns a scheduled batch into tensors, runs it, samples.

Per step the host uploads the batch's ids, positions, slots and block tables and reads
back only the sampled token ids; on CUDA, decode-only steps replay a CUDA graph
(cuda_graphs.py) with the Triton paged-attention kernel (triton_attention.py).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from ..attention import AttentionMetadata, PrefillChunk
from ..config import EngineConfig
from ..loader import load_checkpoint
from ..model import CausalLM
from ..tokenizer import VOCAB_SIZE
from .cuda_graphs import DecodeGraphs
from .sampler import Sampler
from .sequence import Sequence

log = logging.getLogger("chaos.reference")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA GPU; use --device cpu or auto")
    return torch.device(name)


def resolve_decode_kernel(name: str, device: torch.device) -> str:
    if name == "torch" or (name == "auto" and device.type != "cuda"):
        return "torch"
    try:
        import triton  # noqa: F401
    except ImportError:
        if name == "triton":
            raise RuntimeError("decode_kernel triton was asked for, but triton does not import; "
                               "pip install triton, or use decode_kernel torch") from None
        return "torch"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("decode_kernel triton runs on a CUDA device (or on CPU under TRITON_INTERPRET=1, "
                           "for tests); use decode_kernel torch or auto")
    return "triton"


class ModelRunner:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        cfg = config.model
        with torch.device(self.device):  # built in place: no copy, and a GPU runs the throwaway default init fast
            model = CausalLM(cfg)
        if config.checkpoint:
            load_checkpoint(model, config.checkpoint)
        else:
            model.init_random(cfg.seed, cfg.init_std)
        self.model = model.to(device=self.device, dtype=self.dtype).eval().fuse()
        self.decode_kernel = resolve_decode_kernel(config.decode_kernel, self.device)
        if self.decode_kernel == "triton":
            self._check_decode_kernel(fall_back=config.decode_kernel == "auto")
        # One block past the block manager's: the scratch block that padded graph rows write to.
        self.scratch_block = config.num_kv_blocks
        slots = (config.num_kv_blocks + 1) * config.block_size
        shape = (2, slots, cfg.num_key_value_heads, cfg.head_dim)
        self.kv_caches = [torch.zeros(shape, device=self.device, dtype=self.dtype)
                          for _ in range(cfg.num_hidden_layers)]
        self.sampler = Sampler(self.device, min(VOCAB_SIZE, cfg.vocab_size))
        self.graphs = None
        if self.device.type == "cuda" and self.decode_kernel == "triton" and not config.enforce_eager:
            try:
                self.graphs = self.decode_graphs(capture=True)
            except Exception as e:  # a server that runs eagerly beats one that does not start
                log.warning("CUDA graph capture failed (%s: %s); decode steps run eagerly", type(e).__name__, e)

    def _check_decode_kernel(self, fall_back: bool) -> None:
        """Run the Triton kernel once against the torch path before trusting it with requests."""
        from ..triton_attention import self_check

        tolerance = 1e-4 if self.dtype == torch.float32 else 5e-2
        try:
            diff = self_check(self.device, self.dtype)
            if not diff <= tolerance:
                raise RuntimeError(f"differs from the torch path by {diff:.3g} (tolerance {tolerance})")
        except Exception as e:
            if not fall_back:
                raise RuntimeError(f"the triton decode kernel failed its start-up check: {e}") from e
            log.warning("triton decode kernel failed its start-up check (%s); using the torch kernel", e)
            self.decode_kernel = "torch"

    def decode_graphs(self, capture: bool) -> DecodeGraphs:
        cfg = self.config
        return DecodeGraphs(self.model, self.kv_caches, max_batch=cfg.max_num_seqs,
                            max_blocks=-(-cfg.max_model_len // cfg.block_size), block_size=cfg.block_size,
                            scratch_block=self.scratch_block, decode_kernel=self.decode_kernel, capture=capture)

    def prepare(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[Sequence]]:
        """Input ids, positions and attention metadata of one step, and the sequences to sample.

        Everything is packed into one int64 array on the host and uploaded in one copy; the
        tensors handed on are views into it.
        """
        bs = self.config.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slot_mapping: list[int] = []
        logits_indices: list[int] = []
        sampling: list[Sequence] = []
        decodes: list[tuple[int, Sequence]] = []
        prefills: list[tuple[int, Sequence]] = []
        for seq in seqs:
            start, n = seq.num_computed_tokens, seq.scheduled_tokens
            offset, table = len(input_ids), seq.block_table
            if n == 1:
                input_ids.append(seq.token_ids[start])
                positions.append(start)
                slot_mapping.append(table[start // bs] * bs + start % bs)
                decodes.append((offset, seq))
            else:
                input_ids += seq.token_ids[start:start + n]
                positions += range(start, start + n)
                slot_mapping += [table[p // bs] * bs + p % bs for p in range(start, start + n)]
                prefills.append((offset, seq))
            if start + n == len(seq):
                logits_indices.append(offset + n - 1)
                sampling.append(seq)

        # Every row a decode and every row sampled (a 1-token prefill chunk short of the end is neither).
        decode_only = not prefills and len(sampling) == len(seqs)
        flat = input_ids + positions + slot_mapping + ([] if decode_only else logits_indices)
        width = 0
        if decodes:
            lens = [s.num_computed_tokens + 1 for _, s in decodes]
            width = -(-max(lens) // bs)
            flat += lens + ([] if decode_only else [o for o, _ in decodes])
        chunk_tables = [s.block_table[:-(-(s.num_computed_tokens + s.scheduled_tokens) // bs)]
                        for _, s in prefills if s.num_computed_tokens > 0]
        for row in chunk_tables:
            flat += row
        if decodes:
            # The decodes' block tables, [len(decodes), width] padded with block 0 (masked by lens), go into the
            # same list: one conversion for the whole step instead of a numpy assignment per row.
            pad = [0] * width
            for _, s in decodes:
                row = s.block_table[:width]
                flat += row
                flat += pad[len(row):]
        take = _Cursor(self._upload(np.array(flat, dtype=np.int64)))

        t = len(input_ids)
        ids, pos = take(t), take(t)
        meta = AttentionMetadata(slot_mapping=take(t), logits_indices=None if decode_only else take(len(sampling)),
                                 block_size=bs, decode_kernel=self.decode_kernel)
        if decodes:
            meta.decode_context_lens = take(len(decodes))
            if not decode_only:
                meta.decode_indices = take(len(decodes))
        chunk_rows = iter(chunk_tables)
        for offset, s in prefills:
            start, n = s.num_computed_tokens, s.scheduled_tokens
            table = take(len(next(chunk_rows))) if start > 0 else None
            meta.prefills.append(PrefillChunk(offset, n, start + n, table))
        if decodes:
            meta.decode_block_tables = take(len(decodes) * width).view(len(decodes), width)
        return ids, pos, meta, sampling

    def _upload(self, packed: np.ndarray) -> torch.Tensor:
        host = torch.from_numpy(packed)
        if self.device.type == "cpu":
            return host
        # Pinned memory comes from torch's caching host allocator, which hands a block out again only after
        # the copy that read it has finished; so the upload is one asynchronous DMA and never overwritten early
        # (a step that samples nothing does not wait for the device).
        return host.pin_memory().to(self.device, non_blocking=True)

    @torch.inference_mode()
    def run(self, seqs: list[Sequence]) -> dict[str, int | Exception]:
        """Compute the scheduled tokens; return the next token of each sequence that reached its end, or the
        exception that sampling its row alone raised (that request fails; the others go on)."""
        input_ids, positions, meta, sampling = self.prepare(seqs)
        if self.graphs is not None and self.graphs.can_run(meta, len(seqs)):
            hidden = self.graphs.run(input_ids, positions, meta)
        else:
            hidden = self.model(input_ids, positions, self.kv_caches, meta)
        if not sampling:
            return {}
        logits = self.model.compute_logits(hidden)
        try:
            ids = self.sampler(logits, sampling)
        except Exception as batch_error:
            ids = self._sample_alone(logits, sampling)
            if len(ids) > 1 and all(isinstance(t, Exception) for t in ids):
                raise batch_error  # every row fails alone too: the sampler itself is broken, not one request
        return {s.request_id: t for s, t in zip(sampling, ids)}

    def _sample_alone(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int | Exception]:
        """Each row on its own, so that one request's settings cannot fail the batch it shares."""
        ids: list[int | Exception] = []
        for i, seq in enumerate(seqs):
            try:
                ids.append(self.sampler(logits[i:i + 1], [seq])[0])
            except Exception as e:
                log.warning("sampling failed for request %s alone: %r", seq.request_id, e)
                ids.append(e)
        return ids


class _Cursor:
    """Hands out consecutive slices of one packed tensor."""

    def __init__(self, packed: torch.Tensor):
        self.packed, self.offset = packed, 0

    def __call__(self, n: int) -> torch.Tensor:
        self.offset += n
        return self.packed[self.offset - n:self.offset]
