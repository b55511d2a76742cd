"""Triton kernels for the draft LM heads (GPU, or the CPU interpreter); each file: kernel + wrapper + torch reference.

    repack_rows     buf[slots] = W[ids]                      (NanoSpec repack buffer)
    gathered_gemm   h @ W[idx].T                             (NanoSpec head over I_t)
    head_epilogue   log-softmax + top-k + remap through I_t
    window_update   per-token counts of Suffix(S, W_max)     (I_t membership)
    lowrank_logits  (h @ W_down.T) @ W_up[idx].T             (SlimSpec / NanoSlim)

Every public function takes `backend` in auto|triton|torch (see `use_triton`).

Backend choice and the lazy Triton `jit`: core/kernels/triton/backend.py.
"""
from core.kernels.triton.backend import (  # noqa: F401  (the package's API)
    BACKENDS, cdiv, interpreting, jit, next_power_of_2, triton_config, triton_installed, triton_interprets,
    use_triton)
from core.kernels.triton.repack import repack_rows, repack_rows_torch
from core.kernels.triton.gathered_gemm import gathered_gemm, gathered_gemm_torch
from core.kernels.triton.epilogue import head_epilogue, head_epilogue_torch, stable_topk
from core.kernels.triton.window import window_update, window_update_torch
from core.kernels.triton.lowrank import lowrank_logits, lowrank_logits_torch

__all__ = ["use_triton", "interpreting", "repack_rows", "gathered_gemm", "head_epilogue", "window_update",
           "lowrank_logits", "repack_rows_torch", "gathered_gemm_torch", "head_epilogue_torch", "stable_topk",
           "window_update_torch", "lowrank_logits_torch"]
