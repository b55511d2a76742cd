"""The fast runtime's settings (FastConfig) and the shape of a supported model (Arch)."""
import os
from dataclasses import dataclass, field


@dataclass
class FastConfig:
    max_len: int = 1024          # cache rows allocated up front; doubled when a forward needs more
    layout: str = "auto"         # auto (bf16: packed, else hybrid) | packed | blocked | hybrid | plain
    block_bytes: int = 0         # bytes per weight block; 0 = half the L2 cache
    check: bool = True           # make_runner('auto'): compare logits with transformers once
    kernels: bool = True         # fused C kernels between the GEMMs (core/kernels/cpu/layer_ops.c) where they build
    weights: str = "model"       # layer GEMM weights: model (its dtype) | int8 | int4 (a draft model's; see QUANTS)
    codes: bool = True           # a GGUF model's products on its codes or blocks (False: oneDNN's packed copy, the A/B)
    # a GGUF model's products: auto (int8 for a bf16 model wherever they run: weights.codes_math) | bf16 (the model's own
    # bf16 weights rebuilt from the Q4_K / Q6_K codes, gguf_codes.py; other types on their int8 blocks) | int8 (llama.cpp's
    # int8 activations on the raw blocks, gguf_q8.py)
    codes_math: str = field(default_factory=lambda: os.environ.get("SPECLENS_GGUF_MATH", "auto").strip().lower())
    # every layer of a pass in one C call where all matrices are int8 blocks (cpu_layer.Q8Layers; same floats)
    one_call: bool = True        # (False: one call per kernel, the A/B; `python -m bench pair --fast one_call=0`)


@dataclass
class Arch:
    n_layers: int
    d: int
    n_heads: int
    n_kv: int
    hd: int
    ffn: int
    eps: float
    scale: float                 # attention logit scale
    qkv_bias: bool
    qk_norm: bool
    sandwich: bool               # gemma3: norms after attention and MLP too
    embed_scale: float           # gemma3: sqrt(d)
    norm_offset: float           # gemma3 RMSNorm multiplies by (1 + w)
    act: object                  # the MLP activation module of the model
    act_id: int                  # its index in cpu_layer.ACTS (-1: not covered by the fused kernels)
