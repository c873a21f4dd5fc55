"""Paged attention over a block-table KV cache, written with plain torch ops.

The cache of one layer is two tensors [num_blocks * block_size, kv_heads, head_dim];
position p of a sequence lives at slot block_table[p // block_size] * block_size +
p % block_size. New K/V are scattered into their slots; each query reads its context
back a whole block at a time (index_select over the block table: one contiguous copy
per block, not one per position). Decodes (one query each) run as one padded batch;
prefill chunks run one sequence at a time with a causal mask offset by the context
already cached (chunked prefill and prefix-cache hits).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass(slots=True)
class PrefillChunk:
    query_start: int  # offset of its first query token in the packed batch
    query_len: int
    context_len: int  # positions attended to, including this chunk
    block_table: torch.Tensor | None  # [num_blocks] of the sequence; None when the chunk is the whole context


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] where each new token's K/V goes
    logits_indices: torch.Tensor  # [num_sampled] packed positions whose logits are sampled
    decode_indices: torch.Tensor | None = None  # [B] packed positions of decode queries
    decode_block_tables: torch.Tensor | None = None  # [B, max_blocks] padded with block 0
    decode_mask: torch.Tensor | None = None  # [B, 1, 1, max_blocks * block_size] True where a key is real
    block_size: int = 16
    prefills: list[PrefillChunk] = field(default_factory=list)


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
    """q: [T, Hq, D]; k, v: [T, Hkv, D]. Returns [T, Hq, D]."""
    k_cache.index_copy_(0, meta.slot_mapping, k)
    v_cache.index_copy_(0, meta.slot_mapping, v)
    out = torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]

    bs = meta.block_size
    kb = k_cache.view(-1, bs, *k_cache.shape[1:])  # [num_blocks, bs, Hkv, D]
    vb = v_cache.view(-1, bs, *v_cache.shape[1:])

    if meta.decode_indices is not None:
        b, nb = meta.decode_block_tables.shape
        flat = meta.decode_block_tables.flatten()
        qd = q[meta.decode_indices].unsqueeze(2)  # [B, Hq, 1, D]
        kd = kb.index_select(0, flat).view(b, nb * bs, *k.shape[1:]).transpose(1, 2)  # [B, Hkv, L, D]
        vd = vb.index_select(0, flat).view(b, nb * bs, *v.shape[1:]).transpose(1, 2)
        od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=meta.decode_mask, enable_gqa=gqa)
        out[meta.decode_indices] = od.squeeze(2)

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
