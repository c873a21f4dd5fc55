"""The torch decode path: gather each sequence's cached context, then one SDPA over the padded batch.

Its own module because two others need it and must not need each other: attention.py runs it as the "torch"
decode kernel (any device), and triton_attention.py checks its Triton kernel against it. Plain torch only, so
importing it never pulls in triton.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def decode_by_gather(q: torch.Tensor, kb: torch.Tensor, vb: torch.Tensor, block_tables: torch.Tensor,
                     context_lens: torch.Tensor, gqa: bool) -> torch.Tensor:
    """q: [B, Hq, D]; kb, vb: [num_blocks, block_size, Hkv, D]. Gathers each context, then one SDPA."""
    b, nb = block_tables.shape
    bs = kb.shape[1]
    flat = block_tables.flatten()
    kd = kb.index_select(0, flat).view(b, nb * bs, *kb.shape[2:]).transpose(1, 2)  # [B, Hkv, L, D]
    vd = vb.index_select(0, flat).view(b, nb * bs, *vb.shape[2:]).transpose(1, 2)
    mask = torch.arange(nb * bs, device=q.device).unsqueeze(0) < context_lens.unsqueeze(1)  # [B, L]
    od = F.scaled_dot_product_attention(q.unsqueeze(2), kd, vd, attn_mask=mask.view(b, 1, 1, -1), enable_gqa=gqa)
    return od.squeeze(2)
