"""Triton kernels for the draft LM heads; every file holds kernel + wrapper + torch reference.

    repack_rows     buf[slots] = W[ids]                      (NanoSpec repack buffer)
    gathered_gemm   h @ W[idx].T                             (NanoSpec head over I_t)
    head_epilogue   log-softmax + top-k + remap through I_t
    window_update   per-token counts of Suffix(S, W_max)     (I_t membership)
    lowrank_logits  (h @ W_down.T) @ W_up[idx].T             (SlimSpec / NanoSlim)

The fast runtime's fused CPU kernels (norms, rope, attention, activation between the GEMMs) are C, not
Triton: cpu_layer.c, built and loaded by cpu_layer.py (Triton runs on the CPU only in its interpreter).

Every public function takes `backend` in auto|triton|torch (see `use_triton`).

Backend choice and the lazy Triton `jit`: core/kernels/backend.py.
"""
from core.kernels.backend import (  # noqa: F401  (the package's API)
    BACKENDS, cdiv, interpreting, jit, next_power_of_2, triton_config, triton_installed, triton_interprets,
    use_triton)
from core.kernels.repack import repack_rows, repack_rows_torch
from core.kernels.gathered_gemm import gathered_gemm, gathered_gemm_torch
from core.kernels.epilogue import head_epilogue, head_epilogue_torch
from core.kernels.window import window_update, window_update_torch
from core.kernels.lowrank import lowrank_logits, lowrank_logits_torch

__all__ = ["use_triton", "interpreting", "repack_rows", "gathered_gemm", "head_epilogue", "window_update",
           "lowrank_logits", "repack_rows_torch", "gathered_gemm_torch", "head_epilogue_torch",
           "window_update_torch", "lowrank_logits_torch"]
