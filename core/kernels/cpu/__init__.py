"""The fast CPU runtime's C kernels: fused layer ops and the int4 product (cpu_layer.c), a GGUF model's codes as its
weights (gguf_mm.c), built with the system's C compiler and loaded with ctypes (cpu_layer.py)."""
