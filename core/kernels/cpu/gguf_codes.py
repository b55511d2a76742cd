"""A GGUF model's Q4_K / Q6_K matrices kept as their codes, for `codes_mm` (codes_mm.c on AMX, codes_mm_avx.c on
AVX512-BF16 or AVX2 + FMA: core/kernels/cpu/isa.py picks the variant).

A model converted from a GGUF holds w = bf16(fl32(D·q − M)) (gguf-py's dequantizer). codes_mm rebuilds exactly those
bf16 values inside the product, so the target reads 4.75 / 8.6 bits per weight instead of 16 and computes with the
same weights. `matrix_codes` packs the tensors that one fused matrix concatenates (q|k|v, gate|up, ...);
`exact` checks, bit for bit, that the codes decode to the weights the model holds (else they are not used).
"""
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from core.kernels.cpu import cpu_layer, isa

QK = 256            # inputs per superblock
TYPES = {"Q4_K": 0, "Q6_K": 1}


class Codes(NamedTuple):
    """One [n, k] matrix as tiles of 16 outputs × 32 inputs (layout: codes_mm.c); offsets per block of 16 outputs."""
    n: int
    k: int
    types: torch.Tensor     # uint8 [n / 16]: 0 Q4_K, 1 Q6_K
    code_off: torch.Tensor  # int64 [n / 16] into codes (bytes)
    sm_off: torch.Tensor    # int64 [n / 16] into sm (bytes)
    dd_off: torch.Tensor    # int64 [n / 16] into dd (floats)
    codes: torch.Tensor     # uint8
    sm: torch.Tensor        # uint8: Q4_K sc | m per tile, Q6_K int8 sc per tile
    dd: torch.Tensor        # float32: per superblock d | dmin (Q4_K) or d (Q6_K)
    variant: str = ""       # the kernel that multiplies them (isa.ORDER), fixed at load; "" = isa.codes_variant()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.sm, self.dd))

    @property
    def label(self) -> str:
        return isa.LABELS[self.variant or isa.codes_variant()]


def tiles(q: np.ndarray) -> np.ndarray:
    """[n, k] per-weight values -> [n/16, k/32, 16, 32]: tile row r holds inputs 2r, 2r+1 of each of 16 outputs."""
    n, k = q.shape
    return q.reshape(n // 16, 16, k // 32, 16, 2).transpose(0, 2, 3, 1, 4).reshape(n // 16, k // 32, 16, 32)


def per_tile(v: np.ndarray, per: int) -> np.ndarray:
    """[n, k / per] per-sub-block values -> [n/16, k/32, 32 // per, 16] (tile order, outputs last)."""
    n, s = v.shape
    return v.reshape(n // 16, 16, s * per // 32, 32 // per).transpose(0, 2, 3, 1)


def per_superblock(*vs: np.ndarray) -> np.ndarray:
    """[n, k / 256] floats (one or two) -> [n/16, k/256, len(vs) · 16]."""
    return np.concatenate([v.reshape(v.shape[0] // 16, 16, -1).transpose(0, 2, 1) for v in vs], -1)


def q4k_fields(raw: np.ndarray):
    """[n, k/256, 144] Q4_K blocks -> q [n, k] (0..15), sc, m [n, k/32] (6-bit), d, dmin [n, k/256] fp32."""
    from gguf.quants import Q4_K
    n, s, _ = raw.shape
    d = raw[..., 0:2].copy().view(np.float16).astype(np.float32).reshape(n, s)
    dmin = raw[..., 2:4].copy().view(np.float16).astype(np.float32).reshape(n, s)
    sc, m = Q4_K.get_scale_min(raw[..., 4:16].reshape(n * s, 12))
    qs = raw[..., 16:].reshape(n, s, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 1, 2, 1)
    return (qs & 0x0F).reshape(n, s * QK), sc.reshape(n, s * 8), m.reshape(n, s * 8), d, dmin


def q6k_fields(raw: np.ndarray):
    """[n, k/256, 210] Q6_K blocks -> q − 32 [n, k] int8, sc [n, k/16] int8, d [n, k/256] fp32 (gguf-py's order)."""
    n, s, _ = raw.shape
    b = raw.reshape(n * s, 210)
    ql = b[:, :128].reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & 0x0F).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & 0x03).reshape(-1, 8, 32)
    q = ((ql | (qh << 4)).astype(np.int8) - np.int8(32)).reshape(n, s * QK)
    sc = b[:, 192:208].copy().view(np.int8).reshape(n, s * 16)
    d = b[:, 208:210].copy().view(np.float16).astype(np.float32).reshape(n, s)
    return q, sc, d


def pack_q4(raw: np.ndarray):
    """(codes [n/16, tiles · 256], sm [n/16, tiles · 32], dd [n/16, superblocks · 32]) of one Q4_K tensor."""
    q, sc, m, d, dmin = q4k_fields(raw)
    t = tiles(q)
    codes = t[:, :, :8] | (t[:, :, 8:] << 4)
    sm = np.concatenate([per_tile(sc, 32), per_tile(m, 32)], 2)
    return codes.reshape(len(t), -1), sm.reshape(len(t), -1), per_superblock(d, dmin).reshape(len(t), -1)


def pack_q6(raw: np.ndarray):
    """(codes [n/16, tiles · 512], sm [n/16, tiles · 32], dd [n/16, superblocks · 16]) of one Q6_K tensor."""
    q, sc, d = q6k_fields(raw)
    t = tiles(q)
    return (t.reshape(len(t), -1).view(np.uint8), per_tile(sc, 16).reshape(len(t), -1).view(np.uint8),
            per_superblock(d).reshape(len(t), -1))


def tensor_codes(kind: str, raw: np.ndarray, n: int, k: int):
    """One GGUF tensor's (type, codes, sm, dd) rows per block of 16 outputs; ValueError if it cannot be held."""
    if kind not in TYPES:
        raise ValueError(f"{kind} is not Q4_K or Q6_K")
    if n % 16 or k % QK:
        raise ValueError(f"[{n}, {k}] is not a multiple of [16, {QK}]")
    blocks = raw.reshape(n, k // QK, -1)
    return (TYPES[kind], *(pack_q4(blocks) if kind == "Q4_K" else pack_q6(blocks)))


def matrix_codes(parts: list) -> Codes:
    """Codes of the matrix that concatenates `parts` [(kind, raw blocks, n, k)] along the outputs."""
    k = parts[0][3]
    if any(p[3] != k for p in parts):
        raise ValueError("the fused tensors differ in their input size")
    packed = [tensor_codes(*p) for p in parts]
    types = np.concatenate([np.full(len(c), t, np.uint8) for t, c, _, _ in packed])
    arrays = [[p[i] for p in packed] for i in (1, 2, 3)]
    flat = [torch.from_numpy(np.ascontiguousarray(np.concatenate([x.reshape(-1) for x in xs]))) for xs in arrays]
    return Codes(sum(p[2] for p in parts), k, torch.from_numpy(types), *(offsets(xs) for xs in arrays), *flat)


def offsets(xs: list) -> torch.Tensor:
    """Where each block of 16 outputs starts in the concatenation of xs [blocks, per block] (int64)."""
    base = np.cumsum([0] + [x.size for x in xs[:-1]])
    return torch.from_numpy(np.concatenate([b + np.arange(len(x)) * x.shape[1] for x, b in zip(xs, base)]).astype(np.int64))


def args(c: Codes) -> list:
    return [c.types.data_ptr(), c.code_off.data_ptr(), c.sm_off.data_ptr(), c.dd_off.data_ptr(), c.codes.data_ptr(),
            c.sm.data_ptr(), c.dd.data_ptr()]


AVX_ISA = {"avx512": 2, "avx2": 1}  # codes_mm_avx's isa argument


def variant_of(c: Codes) -> str:
    """The kernel variant for c; RuntimeError where it does not run here."""
    v = c.variant or isa.codes_variant()
    if v not in isa.codes_variants() or v == "none":
        raise RuntimeError(f"codes_mm: no {v} kernel here (variants here: {', '.join(isa.codes_variants())})")
    return v


def codes_mm(x, c: Codes):
    """x [m, k] @ the matrix^T -> bf16 [m, n] (x rounded to bf16); each row the same whatever m is."""
    if x.shape[0] < 1 or x.shape[1] != c.k:
        raise ValueError(f"codes_mm: x [{x.shape[0]}, {x.shape[1]}] needs rows of {c.k} inputs")
    v = variant_of(c)
    x = x.to(torch.bfloat16).contiguous()
    y = torch.empty(x.shape[0], c.n, dtype=torch.bfloat16)
    head = [] if v == "amx" else [AVX_ISA[v]]
    getattr(cpu_layer.lib(), "codes_mm" if v == "amx" else "codes_mm_avx")(
        *head, x.data_ptr(), x.shape[0], c.k, c.n, *args(c), y.data_ptr(), torch.get_num_threads())
    return y


def decode(c: Codes):
    """The matrix the codes stand for, bf16 [n, k] (decoded by c's variant)."""
    v = variant_of(c)
    w = torch.empty(c.n, c.k, dtype=torch.bfloat16)
    head = [] if v == "amx" else [AVX_ISA[v]]
    getattr(cpu_layer.lib(), "codes_decode" if v == "amx" else "codes_decode_avx")(
        *head, c.k, c.n, *args(c), w.data_ptr(), torch.get_num_threads())
    return w


def exact(c: Codes, w) -> bool:
    """Whether the codes decode to w [n, k] bit for bit."""
    return tuple(w.shape) == (c.n, c.k) and torch.equal(decode(c), w.to(torch.bfloat16))


# ---------------------------------------------------------------- a model's matrices, cached beside its GGUF

LAYOUT = 1  # bumped when the tile layout changes: cached codes are then rebuilt
GGUF_NAMES = {"wqkv": ("attn_q", "attn_k", "attn_v"), "wo": ("attn_output",), "wgu": ("ffn_gate", "ffn_up"),
              "wd": ("ffn_down",)}  # the runtime's fused matrices (core/runtime/fast.py: linears)
FIELDS = ("types", "code_off", "sm_off", "dd_off", "codes", "sm", "dd")


def matrix_tensors(n_layers: int, tensors: dict) -> dict:
    """{'head' | 'i.wqkv' ...: GGUF tensor names}; the head is `output.weight`, else the tied embedding."""
    names = {f"{i}.{k}": [f"blk.{i}.{t}.weight" for t in ts] for i in range(n_layers) for k, ts in GGUF_NAMES.items()}
    names["head"] = ["output.weight" if "output.weight" in tensors else "token_embd.weight"]
    return names


def build_codes(gguf_path, n_layers: int) -> dict:
    """{matrix: Codes} for every fused matrix whose tensors are all present and held by the tiles (tensor_codes)."""
    from gguf import GGUFReader
    tensors = {t.name: t for t in GGUFReader(str(gguf_path)).tensors}
    out = {}
    for key, names in matrix_tensors(n_layers, tensors).items():
        parts = [(tensors[t].tensor_type.name, np.asarray(tensors[t].data), int(tensors[t].shape[1]),
                  int(tensors[t].shape[0])) for t in names if t in tensors]
        if len(parts) < len(names):
            continue
        try:
            out[key] = matrix_codes(parts)
        except ValueError:  # another type or shape: the runtime keeps its packed path for this matrix
            continue
    return out


def save_codes(codes: dict, path) -> None:
    from safetensors.torch import save_file

    from core.paths import write_atomic
    flat = {f"{key}.{f}": getattr(c, f) for key, c in codes.items() for f in FIELDS}
    meta = {"layout": str(LAYOUT), **{key: f"{c.n},{c.k}" for key, c in codes.items()}}
    write_atomic(path, lambda tmp: save_file(flat, tmp, metadata=meta))


def load_codes(path) -> dict | None:
    """The cached codes, or None when the file is missing or of another layout."""
    from safetensors import safe_open
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            if meta.get("layout") != str(LAYOUT):
                return None
            shapes = {key: tuple(map(int, v.split(","))) for key, v in meta.items() if key != "layout"}
            return {key: Codes(n, k, *(f.get_tensor(f"{key}.{fl}") for fl in FIELDS)) for key, (n, k) in shapes.items()}
    except (OSError, ValueError, RuntimeError):
        return None


def model_codes(gguf_path, n_layers: int) -> dict:
    """{matrix: Codes} of a GGUF model, packed once and cached beside the GGUF (`NAME.codes.safetensors`)."""
    cache = Path(gguf_path).with_suffix(".codes.safetensors")
    codes = load_codes(cache)
    if codes is None:
        print(f"{Path(gguf_path).name}: packing its Q4_K / Q6_K codes for the fast runtime once", file=sys.stderr,
              flush=True)
        codes = build_codes(gguf_path, n_layers)
        try:
            save_codes(codes, cache)
        except OSError:
            pass  # a read-only cache: packed again next time
    return codes
