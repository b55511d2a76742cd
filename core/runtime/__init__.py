"""Runners: the eager transformers runner and the fast CPU/CUDA runtime (KV cache, fused C kernels, exact bf16 row padding)."""
