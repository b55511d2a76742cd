"""Repack buffer update: buf[slots[i]] = W[ids[i]] for the m rows that entered I_t.

Shapes: buf [C, d], W [V, d], slots / ids LongTensor [m]. Only those m rows of buf are written,
in one launch (none when m = 0). Slots must be distinct (duplicate slots: any one row wins).
Program instance p copies rows i in [p * BLOCK_M, (p + 1) * BLOCK_M), BLOCK_D columns at a time.
"""
from __future__ import annotations  # kernel signatures say tl.constexpr before tl exists

import torch

from core.kernels.triton.backend import cdiv, jit, use_triton

tl = None  # triton.language, bound by core.kernels.triton.backend.jit on the first Triton call

GPU_CONFIGS = [dict(BLOCK_M=1, BLOCK_D=1024, num_warps=4), dict(BLOCK_M=4, BLOCK_D=512, num_warps=4),
               dict(BLOCK_M=8, BLOCK_D=256, num_warps=4), dict(BLOCK_M=16, BLOCK_D=256, num_warps=8)]
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_D=64)


def repack_kernel(buf, W, slots, ids, m, d, stride_buf, stride_w,
                  BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < m
    src = tl.load(ids + offs_m, mask=mask_m, other=0)
    dst = tl.load(slots + offs_m, mask=mask_m, other=0)
    offs_d = tl.arange(0, BLOCK_D)
    for d0 in range(0, d, BLOCK_D):
        cols = d0 + offs_d
        mask = mask_m[:, None] & (cols < d)[None, :]
        rows = tl.load(W + src[:, None] * stride_w + cols[None, :], mask=mask)  # [BLOCK_M, BLOCK_D] of W[ids]
        tl.store(buf + dst[:, None] * stride_buf + cols[None, :], rows.to(buf.dtype.element_ty), mask=mask)


def repack_rows_triton(buf: torch.Tensor, W: torch.Tensor, slots: torch.Tensor, ids: torch.Tensor) -> None:
    m, d = ids.numel(), W.shape[1]
    if m == 0:
        return
    assert buf.stride(1) == 1 and W.stride(1) == 1, "rows must be contiguous"
    kernel = jit(repack_kernel, GPU_CONFIGS, INTERPRETER_CONFIG, key=["d"])
    grid = lambda meta: (cdiv(m, meta["BLOCK_M"]),)  # noqa: E731
    slots, ids = slots.to(buf.device).contiguous(), ids.to(W.device).contiguous()
    kernel[grid](buf, W, slots, ids, m, d, buf.stride(0), W.stride(0))


def repack_rows_torch(buf: torch.Tensor, W: torch.Tensor, slots: torch.Tensor, ids: torch.Tensor) -> None:
    buf.index_copy_(0, slots.to(buf.device), W.index_select(0, ids.to(W.device)).to(buf.dtype))


def repack_rows(buf: torch.Tensor, W: torch.Tensor, slots: torch.Tensor, ids: torch.Tensor,
                backend: str = "auto") -> None:
    """buf[slots[i]] = W[ids[i]] in place; every other row of buf is left untouched."""
    if use_triton(backend, buf.device):
        repack_rows_triton(buf, W, slots, ids)
    else:
        repack_rows_torch(buf, W, slots, ids)
