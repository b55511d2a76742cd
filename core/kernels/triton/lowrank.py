"""Low-rank LM head (SlimSpec W ~ W_up W_down; NanoSlim = the W_up rows of I_t).

Shapes: h [n, d], W_down [r, d], W_up [V or C, r], idx LongTensor [k] | None -> fp32 [n, k] (idx None:
[n, rows of W_up]). logits = z @ W_up[idx].T with z = h @ W_down.T rounded to W_up's dtype, as two
chained linear layers in that dtype would (a no-op for fp32).

Two passes of the gathered GEMM kernel (core/kernels/triton/gathered_gemm.py), each weight read once:
  pass 1  z [n, r] = h @ W_down.T      program = BLOCK_K rows of W_down (small blocks: r is small)
  pass 2  logits = z @ W_up[idx].T     program = BLOCK_K rows of W_up read through idx
z is rounded between them by torch (n*r elements): the interpreter's in-kernel fp32 -> bf16 cast
truncates instead of rounding to nearest even, so an in-kernel cast could not be tested here.
Fusing them would make every pass-2 program recompute z, i.e. re-read all of W_down [r, d] once per
BLOCK_K rows of W_up, which costs more than the n*r intermediate it saves.
"""
import torch

from core.kernels.triton.backend import use_triton
from core.kernels.triton.gathered_gemm import gathered_gemm_into

DOWN_CONFIGS = [dict(BLOCK_K=16, BLOCK_D=256, num_warps=4, num_stages=3),
                dict(BLOCK_K=32, BLOCK_D=128, num_warps=4, num_stages=3),
                dict(BLOCK_K=16, BLOCK_D=512, num_warps=8, num_stages=2)]


def lowrank_logits_triton(h: torch.Tensor, W_down: torch.Tensor, W_up: torch.Tensor,
                          idx: torch.Tensor | None) -> torch.Tensor:
    n, r = h.shape[0], W_down.shape[0]
    k = W_up.shape[0] if idx is None else idx.numel()
    z = torch.empty(n, r, dtype=torch.float32, device=h.device)
    z = gathered_gemm_into(z, h, W_down, None, DOWN_CONFIGS).to(W_up.dtype)  # [n, d] @ [d, r]
    out = torch.empty(n, k, dtype=torch.float32, device=h.device)
    return gathered_gemm_into(out, z, W_up, idx)  # [n, r] @ [r, k]


def lowrank_logits_torch(h: torch.Tensor, W_down: torch.Tensor, W_up: torch.Tensor,
                         idx: torch.Tensor | None) -> torch.Tensor:
    z = (h.float() @ W_down.float().T).to(W_up.dtype)  # [n, d] @ [d, r]
    rows = W_up if idx is None else W_up.index_select(0, idx.to(W_up.device))
    return z.float() @ rows.float().T  # [n, r] @ [r, k]


def lowrank_logits(h: torch.Tensor, W_down: torch.Tensor, W_up: torch.Tensor, idx: torch.Tensor | None,
                   backend: str = "auto") -> torch.Tensor:
    """fp32 logits (h @ W_down.T) @ W_up[idx].T: [n, k], or [n, rows of W_up] when idx is None."""
    if use_triton(backend, h.device):
        return lowrank_logits_triton(h, W_down, W_up, idx)
    return lowrank_logits_torch(h, W_down, W_up, idx)
