"""Kernels by backend: triton/ holds the draft LM heads' Triton kernels (GPU, or the CPU interpreter), cpu/ the fast
CPU runtime's C kernels (fused layer ops, int4 and GGUF-codes products). They import nothing above core.paths."""
