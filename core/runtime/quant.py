"""Weight-only quantization of a draft's layers: int8 as Q8_0 blocks for q8_mm (int8 activations, llama.cpp's
arithmetic) where it runs, else per output channel (torch's kernel); int4 per group of INT4_GROUP inputs (our
AVX512-VNNI kernel where it is built, else torch's). `weights.mm` multiplies by them (`quant_mm`): q8_mm's for any
number of rows, the others for up to QUANT_ROWS rows."""
import torch

from core.kernels.cpu import cpu_layer, gguf_q8, isa

QUANTS = ("int8", "int4")  # weight-only, per output channel (int8) or per group of INT4_GROUP inputs (int4)

INT4_GROUP = 64


def q8_blocks_here() -> bool:
    """Whether int8 weights become Q8_0 blocks on q8_mm here (else torch's per-channel int8)."""
    return gguf_q8.available()


def q8_fits(w) -> bool:
    """Whether quantize(w, "int8") gives Q8_0 blocks (q8_mm runs here and w's inputs are whole 32-blocks)."""
    return q8_blocks_here() and w.shape[1] % 32 == 0


def quantize(w, kind: str) -> tuple:
    """Weight-only quantization of w [out, in]: int8 as Q8_0 blocks where q8_mm runs (a draft's layer of 1 / 6 rows:
    ~0.65 / 0.3 of torch's int8 kernel's time, docs/runtime.md), else symmetric per output channel (torch's kernel);
    int4 asymmetric per group of INT4_GROUP inputs, w = q · scale + lo, for our AVX512-VNNI kernel where it is built,
    else torch's. (kind, implementation, tensors...)."""
    if kind == "int8" and q8_fits(w):
        return "int8", "q8", gguf_q8.q8_0_codes(w)
    w32, dt = w.float().contiguous(), w.dtype
    if kind == "int8":
        scale = (w32.abs().amax(1) / 127).clamp(min=1e-8).to(dt)
        return "int8", "torch", (w32 / scale.float()[:, None]).round().clamp(-127, 127).to(torch.int8), scale
    q, scale, lo = int4_codes(w32)
    if w.shape[1] % cpu_layer.INT4_PAIR == 0 and isa.int4_vnni():
        return "int4", "vnni", cpu_layer.pack_int4(q, INT4_GROUP), scale.contiguous(), lo.contiguous()
    scales_zeros = torch.stack([scale, lo + 8 * scale], -1).transpose(0, 1).contiguous().to(dt)  # [groups, out, 2]
    return "int4", "torch", torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1), INT4_GROUP, scales_zeros


def int4_codes(w32):
    """w [out, in] fp32 -> (codes [out, in] in 0..15, scale, lo [out, in / INT4_GROUP]), w ≈ codes · scale + lo."""
    out, k = w32.shape
    g = w32.view(out, k // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    return ((g - lo[..., None]) / scale[..., None]).round().clamp(0, 15).view(out, k), scale, lo
