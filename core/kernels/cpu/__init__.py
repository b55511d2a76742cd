"""The fast CPU runtime's C kernels (every exported function: kernels.h): fused layer ops (layer_ops.c), a draft's int4
product (int4_mm.c), a GGUF model's codes as its bf16 weights (codes_mm.c, codes_mm_avx.c) or its blocks with int8
activations (q8_mm.c, layers_q8.c), a low-rank head (lowrank_mm.c); built with the system's C compiler (build.py) and
loaded with ctypes (cpu_layer.py)."""
