"""Paged attention over a block-table KV cache, written with plain torch ops.

The cache of one layer is two tensors [num_blocks * block_size, kv_heads, head_dim];
position p of a sequence lives at slot block_table[p // block_size] * block_size +
p % block_size. New K/V are scattered into their slots; each query reads its context
back a whole block at a time (index_select over the block table: one contiguous copy
per block, not one per position). Decodes (one query each) run as one padded batch;
prefill chunks run one sequence at a time with a causal mask offset by the context
already cached (chunked prefill and prefix-cache hits).

Decode has two kernels with the same inputs: "torch" (decode_gather.py: the gather above,
then SDPA; any device) and "triton" (triton_attention.py: reads the cache in place, for
CUDA, and the one CUDA graphs capture).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .decode_gather import decode_by_gather


@dataclass(slots=True)
class PrefillChunk:
    query_start: int  # offset of its first query token in the packed batch
    query_len: int
    context_len: int  # positions attended to, including this chunk
    block_table: torch.Tensor | None  # [num_blocks] of the sequence; None when the chunk is the whole context


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] where each new token's K/V goes
    logits_indices: torch.Tensor | None  # [num_sampled] packed rows whose logits are sampled; None: all rows
    decode_block_tables: torch.Tensor | None = None  # [B, max_blocks], padded with block 0; None: no decodes
    decode_context_lens: torch.Tensor | None = None  # [B] positions each decode attends to, its own included
    decode_indices: torch.Tensor | None = None  # [B] packed rows of the decodes; None: every row is one
    block_size: int = 16
    prefills: list[PrefillChunk] = field(default_factory=list)
    decode_kernel: str = "torch"  # or "triton"


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """q: [T, Hq, D]; k, v: [T, Hkv, D]. Returns [T, Hq, D]."""
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    all_decodes = meta.decode_block_tables is not None and meta.decode_indices is None
    out = None if all_decodes else torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]

    bs = meta.block_size
    kb = k_cache.view(-1, bs, *k_cache.shape[1:])  # [num_blocks, bs, Hkv, D]
    vb = v_cache.view(-1, bs, *v_cache.shape[1:])

    if meta.decode_block_tables is not None:
        qd = q if meta.decode_indices is None else q[meta.decode_indices]
        if meta.decode_kernel == "triton":
            from .triton_attention import paged_decode  # imported on first use: see its docstring
            od = paged_decode(qd, k_cache, v_cache, meta.decode_block_tables, meta.decode_context_lens, bs)
        else:
            od = decode_by_gather(qd, kb, vb, meta.decode_block_tables, meta.decode_context_lens, gqa)
        if all_decodes:
            return od
        out[meta.decode_indices] = od

    for chunk in meta.prefills:
        s, n = chunk.query_start, chunk.query_len
        qp = q[s:s + n].transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
        if chunk.block_table is None:
            kp = k[s:s + n].transpose(0, 1).unsqueeze(0)
            vp = v[s:s + n].transpose(0, 1).unsqueeze(0)
            op = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=gqa)
        else:
            ctx = chunk.context_len
            kp = kb.index_select(0, chunk.block_table).flatten(0, 1)[:ctx].transpose(0, 1).unsqueeze(0)
            vp = vb.index_select(0, chunk.block_table).flatten(0, 1)[:ctx].transpose(0, 1).unsqueeze(0)
            offset = chunk.context_len - n
            qpos = torch.arange(n, device=q.device).unsqueeze(1) + offset
            kpos = torch.arange(chunk.context_len, device=q.device).unsqueeze(0)
            op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=kpos <= qpos, enable_gqa=gqa)
        out[s:s + n] = op.squeeze(0).transpose(0, 1)
    return out

