"""Gathered GEMM: logits = h @ W[idx].T, reading the rows of W through idx (no gathered copy).

Shapes: h [n, d], W [V, d], idx LongTensor [k] (None: all V rows) -> logits fp32 [n, k].
Program instance (pk, pn) computes logits[pn*BLOCK_N : +BLOCK_N, pk*BLOCK_K : +BLOCK_K], walking d
in BLOCK_D steps: acc += h[rows, d0:d0+BLOCK_D] @ W[idx[cols], d0:d0+BLOCK_D].T, accumulated in fp32.
bf16/fp16 pairs use the tensor-core dot; fp32 (or mixed dtypes) an exact fp32 dot ("ieee", no tf32).
"""
from __future__ import annotations  # kernel signatures say tl.constexpr before tl exists

import torch

from core.kernels.triton.backend import cdiv, interpreting, jit, next_power_of_2, use_triton

tl = None  # triton.language, bound by core.kernels.triton.backend.jit on the first Triton call

GPU_CONFIGS = [dict(BLOCK_K=64, BLOCK_D=128, num_warps=4, num_stages=3),
               dict(BLOCK_K=128, BLOCK_D=64, num_warps=4, num_stages=4),
               dict(BLOCK_K=128, BLOCK_D=128, num_warps=8, num_stages=3),
               dict(BLOCK_K=32, BLOCK_D=256, num_warps=4, num_stages=3)]
INTERPRETER_CONFIG = dict(BLOCK_K=1024, BLOCK_D=64)  # few, large programs: the interpreter pays per program


def gathered_gemm_kernel(h, W, idx, out, n, k, d, stride_h, stride_w, stride_out,
                         HAS_IDX: tl.constexpr, DOT_FP32: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr):
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_k, mask_n = offs_k < k, offs_n < n
    if HAS_IDX:
        rows = tl.load(idx + offs_k, mask=mask_k, other=0)  # idx[cols]: rows of W, int64
    else:
        rows = offs_k.to(tl.int64)
    h_ptrs = h + offs_n[:, None] * stride_h + offs_d[None, :]
    w_ptrs = W + rows[:, None] * stride_w + offs_d[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for d0 in range(0, d, BLOCK_D):
        mask_d = (d0 + offs_d) < d
        a = tl.load(h_ptrs + d0, mask=mask_n[:, None] & mask_d[None, :], other=0.0)
        b = tl.load(w_ptrs + d0, mask=mask_k[:, None] & mask_d[None, :], other=0.0)
        if DOT_FP32:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")  # [BLOCK_N, BLOCK_D] @ [BLOCK_D, BLOCK_K]
    out_ptrs = out + offs_n[:, None] * stride_out + offs_k[None, :]
    tl.store(out_ptrs, acc.to(out.dtype.element_ty), mask=mask_n[:, None] & mask_k[None, :])


def block_n(n: int) -> int:
    """Rows of h per program: tl.dot needs >= 16; n <= 64 fits one program column."""
    return min(64, max(16, next_power_of_2(n)))


def gathered_gemm_into(out: torch.Tensor, h: torch.Tensor, W: torch.Tensor, idx: torch.Tensor | None,
                       configs: list = GPU_CONFIGS) -> torch.Tensor:
    """out [n, k] = h @ W[idx].T, cast to out.dtype, one launch; configs: the autotuned set."""
    h = h if h.stride(-1) == 1 else h.contiguous()
    assert W.stride(1) == 1 and out.stride(1) == 1, "rows of W and out must be contiguous"
    (n, d), k = h.shape, out.shape[1]
    if n == 0 or k == 0:
        return out
    kernel = jit(gathered_gemm_kernel, configs, INTERPRETER_CONFIG, key=["d", "BLOCK_N", "HAS_IDX"])
    idx_arg = W if idx is None else idx.to(W.device).contiguous()  # a dummy pointer when HAS_IDX is False
    # the interpreter multiplies bf16 tiles as their uint16 storage: upcast first (bf16 products are exact in fp32)
    dot_fp32 = W.dtype == torch.float32 or h.dtype != W.dtype or interpreting()
    BLOCK_N = block_n(n)
    grid = lambda meta: (cdiv(k, meta["BLOCK_K"]), cdiv(n, BLOCK_N))  # noqa: E731
    kernel[grid](h, W, idx_arg, out, n, k, d, h.stride(0), W.stride(0), out.stride(0),
                 HAS_IDX=idx is not None, DOT_FP32=dot_fp32, BLOCK_N=BLOCK_N)
    return out


def gathered_gemm_triton(h: torch.Tensor, W: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
    k = W.shape[0] if idx is None else idx.numel()
    return gathered_gemm_into(torch.empty(h.shape[0], k, dtype=torch.float32, device=h.device), h, W, idx)


def gathered_gemm_torch(h: torch.Tensor, W: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
    rows = W if idx is None else W.index_select(0, idx.to(W.device))
    return h.float() @ rows.float().T  # [n, d] @ [d, k]


def gathered_gemm(h: torch.Tensor, W: torch.Tensor, idx: torch.Tensor | None, backend: str = "auto") -> torch.Tensor:
    """fp32 logits [n, k] = h @ W[idx].T (idx None: all rows of W)."""
    if use_triton(backend, h.device):
        return gathered_gemm_triton(h, W, idx)
    return gathered_gemm_torch(h, W, idx)
