"""Paged decode attention as one Triton kernel: the GPU path of attention.py's decode branch.

The torch path gathers every sequence's context into a padded [B, L, heads, D] copy
before attention, which on a GPU costs more memory traffic than the attention itself.
This kernel reads K/V straight from the cache slots through the block table, in tiles
of BLOCK_N positions, with an online softmax (one pass, nothing materialised). One
program handles one sequence and one KV head, so the query heads that share that KV
head (grouped-query attention) are one [BLOCK_H, D] tile and the scores a tl.dot.

Its shapes depend only on the batch, never on how long contexts are, so it can be
captured in a CUDA graph (engine/cuda_graphs.py) and replayed as contexts grow.

Import this module only where it is used: triton.jit decides at import time whether
kernels compile for the GPU or run in Triton's CPU interpreter (TRITON_INTERPRET=1,
which the tests use to check this kernel on machines without a GPU).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .decode_gather import decode_by_gather

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # read once, as triton.jit does


@triton.jit
def _attend_tile(start, q, m, l, acc, k_ptr, v_ptr, table_row_ptr, context_len, kv_head, stride_ks, stride_kh,
                 d, d_mask, scale, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr):
    """Fold positions [start, start + BLOCK_N) into the running max m, denominator l and output acc."""
    pos = start + tl.arange(0, BLOCK_N)
    p_mask = pos < context_len
    block = tl.load(table_row_ptr + pos // BLOCK_SIZE, mask=p_mask, other=0)
    slot = block.to(tl.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
    kv_off = slot[:, None] * stride_ks + kv_head * stride_kh + d[None, :]
    kv_mask = p_mask[:, None] & d_mask[None, :]
    k = tl.load(k_ptr + kv_off, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
    v = tl.load(v_ptr + kv_off, mask=kv_mask, other=0.0)
    if IEEE:  # float32 caches: exact products, so greedy output matches the CPU path
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = tl.where(p_mask[None, :], s * scale, float("-inf"))  # [BLOCK_H, BLOCK_N]
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new[:, None])
    l = l * alpha + tl.sum(p, axis=1)
    if IEEE:
        pv = tl.dot(p, v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l, acc * alpha[:, None] + pv


# The block table and lengths are slices of one packed upload and the table stride is the widest table of an eager
# step: none is specialised, so no new variant compiles as contexts grow or offsets shift (q, the caches and their
# strides stay specialised: that alignment gives 16-byte, pipelined K/V loads).
@triton.jit(do_not_specialize=["tables_ptr", "lens_ptr", "stride_tb"])
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, lens_ptr,
                         stride_qb, stride_qh, stride_ks, stride_kh, stride_tb, stride_ob, stride_oh,
                         scale, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                         IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    context_len = tl.load(lens_ptr + seq)
    table_row_ptr = tables_ptr + seq * stride_tb

    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    h_mask = h < GROUP
    d_mask = d < HEAD_DIM
    q_heads = kv_head * GROUP + h
    q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + d[None, :],
                mask=h_mask[:, None] & d_mask[None, :], other=0.0)  # [BLOCK_H, BLOCK_D]

    m = tl.full([BLOCK_H], float("-inf"), tl.float32)  # running max of the scores
    l = tl.zeros([BLOCK_H], tl.float32)  # running softmax denominator
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
    if INTERPRET:
        # The CPU interpreter cannot take a loaded scalar as a range bound under numpy >= 2.4.
        start = 0
        while start < context_len:
            m, l, acc = _attend_tile(start, q, m, l, acc, k_ptr, v_ptr, table_row_ptr, context_len, kv_head,
                                     stride_ks, stride_kh, d, d_mask, scale, BLOCK_SIZE, BLOCK_N, IEEE)
            start += BLOCK_N
    else:
        for start in range(0, context_len, BLOCK_N):  # a for loop, so the compiler can pipeline the loads
            m, l, acc = _attend_tile(start, q, m, l, acc, k_ptr, v_ptr, table_row_ptr, context_len, kv_head,
                                     stride_ks, stride_kh, d, d_mask, scale, BLOCK_SIZE, BLOCK_N, IEEE)

    out = acc / tl.where(l > 0, l, 1.0)[:, None]  # an empty context (a padded row) gives zeros, not NaN
    tl.store(out_ptr + seq * stride_ob + q_heads[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=h_mask[:, None] & d_mask[None, :])


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, block_size: int) -> torch.Tensor:
    """One query per sequence against its cached context.

    q: [B, Hq, D]; k_cache, v_cache: [slots, Hkv, D] with slot = block * block_size + offset;
    block_tables: [B, >= ceil(max context / block_size)]; context_lens: [B] (0 gives a zero row).
    Returns [B, Hq, D] in q's dtype.
    """
    b, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} KV heads evenly")
    if k_cache.stride(2) != 1 or q.stride(2) != 1 or block_tables.stride(1) != 1:
        raise ValueError("paged_decode needs the last dimension of q, the caches and the block table contiguous")
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    _paged_decode_kernel[(b, num_kv_heads)](
        q, k_cache, v_cache, out, block_tables, context_lens,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), block_tables.stride(0),
        out.stride(0), out.stride(1), head_dim ** -0.5,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        BLOCK_H=max(16, triton.next_power_of_2(group)),  # tl.dot needs at least 16 rows
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_N=64, IEEE=q.dtype == torch.float32, INTERPRET=_INTERPRET)
    return out


class DecodeCase:
    """A random decode batch over a paged cache, for checking and timing the kernel against the torch path."""

    def __init__(self, context_lens: list[int], heads: int, kv_heads: int, head_dim: int, block_size: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        width = -(-max(context_lens) // block_size)
        self.num_blocks = len(context_lens) * width
        self.block_size = block_size
        slots = self.num_blocks * block_size
        self.k = torch.randn(slots, kv_heads, head_dim, generator=g).to(device, dtype)
        self.v = torch.randn(slots, kv_heads, head_dim, generator=g).to(device, dtype)
        self.q = torch.randn(len(context_lens), heads, head_dim, generator=g).to(device, dtype)
        # Every sequence's blocks scattered over the whole cache, as after a while of serving.
        self.tables = torch.randperm(self.num_blocks, generator=g).view(len(context_lens), width).to(device)
        self.lens = torch.tensor(context_lens, device=device)

    def kernel(self) -> torch.Tensor:
        return paged_decode(self.q, self.k, self.v, self.tables, self.lens, self.block_size)

    def gather(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The torch path (decode_gather.decode_by_gather), in the case's dtype or the one given."""
        dtype = dtype or self.q.dtype
        kb, vb = (t.view(self.num_blocks, self.block_size, *t.shape[1:]).to(dtype) for t in (self.k, self.v))
        return decode_by_gather(self.q.to(dtype), kb, vb, self.tables, self.lens, self.q.shape[1] != self.k.shape[1])

    def max_diff(self) -> float:
        """Max |kernel - torch path in float32|."""
        return (self.kernel().float() - self.gather(torch.float32)).abs().max().item()


def self_check(device: torch.device, dtype: torch.dtype) -> float:
    """Max |difference| from the torch path on a small random batch (run once when an engine starts)."""
    return DecodeCase([1, 33, 64], heads=4, kv_heads=2, head_dim=64, block_size=16, device=device,
                      dtype=dtype).max_diff()
