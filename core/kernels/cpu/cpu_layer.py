"""The kernels' library, loaded with ctypes: built once with the C compiler CC names for one x86 level (build.py: cached
by source, compiler, CPU and level; a failed build remembered); every function it exports is declared in kernels.h.
  layer_ops.c     the fused per-layer ops between the GEMMs (rms, act, attention) and the verify's top-2 / top-k; their
                  torch reference is the runtime's own torch path (core/runtime/fast.py), which the tests compare them with
  int4_mm.c       a draft model's int4 product (AVX512-VNNI; `int4_available()`); its reference is the dequantized matrix
  codes_mm.c      a GGUF model's codes as its bf16 weights on AMX tiles (`amx_ok()`), codes_mm_avx.c the same product on
                  AVX512-BF16 or AVX2 + FMA (both wrapped by gguf_codes.py)
  q8_mm.c         a GGUF matrix's raw blocks times int8-quantized activations, llama.cpp's arithmetic, on AVX2 /
                  AVX-VNNI / AVX512-VNNI / AMX-INT8 (q8_dot.h, q8_amx.h; gguf_q8.py; its timing options: tuning.py)
  layers_q8.c     every layer of a pass in one call where all matrices are int8 blocks (`Q8Layers`)
  lowrank_mm.c    a low-rank head's logits over the whole vocabulary (lowrank_mm.py)
Which variant of each runs: isa.py, from the library's *_isa() bitmasks.

`lib()` is None where the library does not build (the runtime then keeps its torch path and says why: `why_not()`,
with the compiler's first error line). SPECLENS_CPU_KERNELS=0 turns them off.
"""
import ctypes
import functools
import hashlib
import os
from pathlib import Path

import torch

from core.kernels.cpu import build, tuning

ACTS = {"silu": 0, "gelu_pytorch_tanh": 1}
P, I, F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
SIGNATURES = {
    "rms_cast": [P, P, F, I, I, P, ctypes.c_int],
    "add_rms": [P, P, ctypes.c_int, P, P, F, I, I, P, ctypes.c_int],
    "act_mul": [P, ctypes.c_int, I, I, ctypes.c_int, P, ctypes.c_int],
    "attend": [P, ctypes.c_int, P, P, P, F, P, P, P, P, I, I, P, I, I, I, I, F, P, ctypes.c_int, ctypes.c_int],
    "int4_mm": [P, ctypes.c_int, ctypes.c_int, P, P, P, ctypes.c_int, P, ctypes.c_int],
    "codes_mm": [P, ctypes.c_int, ctypes.c_int, ctypes.c_int, P, P, P, P, P, P, P, P, ctypes.c_int],
    "codes_decode": [ctypes.c_int, ctypes.c_int, P, P, P, P, P, P, P, P, ctypes.c_int],
    "codes_mm_avx": [ctypes.c_int, P, ctypes.c_int, ctypes.c_int, ctypes.c_int, P, P, P, P, P, P, P, P, ctypes.c_int],
    "codes_decode_avx": [ctypes.c_int, ctypes.c_int, ctypes.c_int, P, P, P, P, P, P, P, P, ctypes.c_int],
    "q8_mm": [ctypes.c_int, P, ctypes.c_int, ctypes.c_int, ctypes.c_int, P, P, P, ctypes.c_int, P, P, P, ctypes.c_int],
    "lowrank_mm": [ctypes.c_int, P, ctypes.c_int, ctypes.c_int, P, ctypes.c_int, I, P, ctypes.c_int],
    "top2_rows": [P, I, I, P, P],
    "topk_rows": [P, I, I, ctypes.c_int, P, P],
    "q8_set_prefetch": [ctypes.c_int],
    "q8_set_pair_rows": [ctypes.c_int],
    "q8_set_stream": [ctypes.c_int],
    "layers_q8": [ctypes.c_int, P, I, I, P, I, P, F, P, P, P, P, P, I, I, I, I, I, F, I, ctypes.c_int, P, ctypes.c_int,
                  ctypes.c_int],
}
INT4_PAIR = 128  # int4_mm reads two groups of 64 inputs per 64 bytes: `in` must be a multiple of this
_why = []


def sources_id() -> str:
    """A digest of the kernels' sources: another one is other code (a calibration keeps it in its key)."""
    return hashlib.sha256(build.sources_digest()).hexdigest()[:16]


@functools.cache
def lib():
    """The loaded library for build.level() (None: the reason is in `why_not()`)."""
    if os.environ.get("SPECLENS_CPU_KERNELS", "1").strip().lower() in ("0", "false", "no", "off"):
        _why.append("turned off by SPECLENS_CPU_KERNELS=0")
        return None
    try:
        return load(build.library())
    except build.BuildError as err:
        _why.append(str(err))
        return None


def one_thread() -> bool:
    """Whether the library was built without OpenMP (a compiler without it, e.g. clang without libomp): its GEMM
    kernels then run on one thread whatever --threads says."""
    return lib() is not None and not lib().omp_built()


QUERIES = ("omp_built", "int4_isa", "codes_isa", "q8_isa", "lowrank_isa", "q8_prefetch_bytes", "q8_pair_rows",
           "q8_stream_bytes")  # int f(void)


def load(path: Path, missing_ok: bool = False) -> ctypes.CDLL:
    """A compiled library with its functions' signatures and q8_mm's tuning in force (tuning.py); missing_ok: an older
    revision's build (the q8-revs suite) may lack functions added since."""
    so = ctypes.CDLL(str(path))
    for name, args in SIGNATURES.items():
        if missing_ok and not hasattr(so, name):
            continue
        status = name in ("top2_rows", "topk_rows")  # 1: torch must answer
        getattr(so, name).argtypes, getattr(so, name).restype = args, ctypes.c_int if status else None
    for name in QUERIES:
        if missing_ok and not hasattr(so, name):
            continue
        getattr(so, name).argtypes, getattr(so, name).restype = [], ctypes.c_int
    tuning.attach(so)
    return so


def why_not() -> str:
    return _why[-1] if _why else ""


FALLBACK_COST = "2-12x slower"  # plain decoding on the torch path against the kernels, by CPU and model (docs/runtime.md)


def off_note() -> str:
    """What the runtime note, the CLI and the app say once where the library did not load."""
    return f"fused kernels off: {why_not()} — {FALLBACK_COST}"


def ptr(t):
    return None if t is None else t.data_ptr()


def is_bf16(t) -> int:
    return int(t.dtype == torch.bfloat16)


def rms_cast(x, w, eps: float, dtype):
    """rms(x) * w as `dtype` (x fp32 [n, d])."""
    out = torch.empty(x.shape, dtype=dtype)
    lib().rms_cast(x.data_ptr(), w.data_ptr(), eps, x.shape[0], x.shape[1], out.data_ptr(), is_bf16(out))
    return out


def add_rms(x, o, ws, w, eps: float, dtype):
    """x += o (ws: x += rms(o) * ws), in place; returns rms(x) * w as `dtype` (None when w is None)."""
    out = None if w is None else torch.empty(x.shape, dtype=dtype)
    lib().add_rms(x.data_ptr(), o.data_ptr(), is_bf16(o), ptr(ws), ptr(w), eps, x.shape[0], x.shape[1],
                  ptr(out), 0 if out is None else is_bf16(out))
    return out


def act_mul(gu, act: int, dtype):
    """act(g) * u for gu = [g | u] [n, 2f] -> [n, f] as `dtype`."""
    n, f = gu.shape[0], gu.shape[1] // 2
    out = torch.empty(n, f, dtype=dtype)
    lib().act_mul(gu.data_ptr(), is_bf16(gu), n, f, act, out.data_ptr(), is_bf16(out))
    return out


def attend(qkv, bqkv, qn, kn, eps: float, cos, sin, kt, v, start: int, bias, a, dtype):
    """qkv [n, (H+2K)*hd] -> attention output [n, H*hd] as `dtype`; writes keys into kt [K, hd, max_len] columns
    and values into v [K, max_len, hd] rows [start, start + n). cos, sin [n, hd]; bias [n, start + n] additive
    (0 / -inf). The kv heads share out torch's threads where the pass is long enough; the floats are the same."""
    n = qkv.shape[0]
    out = torch.empty(n, a.n_heads * a.hd, dtype=dtype)
    lib().attend(qkv.data_ptr(), is_bf16(qkv), ptr(bqkv), ptr(qn), ptr(kn), eps, cos.data_ptr(), sin.data_ptr(),
                 kt.data_ptr(), v.data_ptr(), v.shape[1], start, bias.data_ptr(), n, a.n_heads, a.n_kv, a.hd, a.scale,
                 out.data_ptr(), is_bf16(out), torch.get_num_threads())
    return out


def top2(logits):
    """(argmax per row [n] int64, the two largest values per row [n, 2]) of fp32 logits [n, V], as torch.argmax (the
    first of equal maxima) and torch.topk(2) give them, in one pass; None where a row holds a NaN or nothing above
    -inf (torch's answer then), or the logits are not a contiguous fp32 CPU tensor."""
    if logits.dtype != torch.float32 or logits.device.type != "cpu" or logits.dim() != 2 or not logits.is_contiguous():
        return None
    n, V = logits.shape
    idx, top = torch.empty(n, dtype=torch.long), torch.empty(n, 2)
    if n == 0 or V < 2 or lib().top2_rows(logits.data_ptr(), n, V, idx.data_ptr(), top.data_ptr()):
        return None
    return idx, top


def topk(x, k: int):
    """(values [n, k], indices [n, k]) of each row's k largest of fp32 x [n, V], best first, equal values in index
    order, in one C pass that merges into the sorted k only the groups of 16 values holding one above the k-th best;
    None where torch must answer (a NaN, fewer than k values above -inf, k > 256, no kernels, not a contiguous fp32 CPU
    matrix)."""
    if lib() is None or x.dtype != torch.float32 or x.device.type != "cpu" or x.dim() != 2 or not x.is_contiguous():
        return None
    n, V = x.shape
    idx, val = torch.empty(n, k, dtype=torch.long), torch.empty(n, k)
    if n == 0 or k == 0:
        return val, idx
    if lib().topk_rows(x.data_ptr(), n, V, k, idx.data_ptr(), val.data_ptr()):
        return None
    return val, idx


def int4_available() -> bool:
    """Whether int4_mm runs here: the library loads, the CPU has AVX512-VNNI and SPECLENS_CPU_ISA allows avx512."""
    return lib() is not None and bool(lib().int4_isa() & 2) and build.allowed("avx512")


def pack_int4(codes, group: int = 64):
    """codes [out, in] in 0..15 -> two 4-bit codes per byte [out, in / 2] uint8 in int4_mm's layout: per pair of
    groups, the low nibbles hold one group and the high nibbles the next."""
    out, k = codes.shape
    q = codes.to(torch.uint8).view(out, k // (2 * group), 2, group)
    return (q[:, :, 0] | (q[:, :, 1] << 4)).contiguous().view(out, k // 2)


INT4_MAX_ROWS = 8  # MAXM in int4_mm.c: the kernel's per-row arrays live on its stack


def int4_mm(x, q, scale, lo):
    """x [n, in] @ the int4 matrix^T -> fp32 [n, out] (n ≤ INT4_MAX_ROWS, in a multiple of 128)."""
    if not 1 <= x.shape[0] <= INT4_MAX_ROWS or x.shape[1] % 128 or q.shape[1] * 2 != x.shape[1]:
        raise ValueError(f"int4_mm: x [{x.shape[0]}, {x.shape[1]}] needs 1..{INT4_MAX_ROWS} rows and an input size "
                         f"that is a multiple of 128 matching the packed matrix's {q.shape[1] * 2}")
    x = x.float().contiguous()
    y = torch.empty(x.shape[0], q.shape[0])
    lib().int4_mm(x.data_ptr(), x.shape[0], x.shape[1], q.data_ptr(), scale.data_ptr(), lo.data_ptr(), q.shape[0],
                  y.data_ptr(), torch.get_num_threads())
    return y


@functools.cache
def amx_ok() -> bool:
    """Whether codes_mm's AMX tiles (codes_mm.c) run here: the CPU has AMX-BF16 and Linux granted this process the tile
    state (asked once; they need it)."""
    return lib() is not None and bool(lib().codes_isa() & 4)


class Q8Mat(ctypes.Structure):  # kernels.h's Q8Mat, Q8Layer
    _fields_ = [("types", P), ("off", P), ("raw", P), ("kinds", I), ("k", I), ("n", I), ("x8", P), ("x8_off", P)]


class Q8Layer(ctypes.Structure):
    _fields_ = [("qkv", Q8Mat), ("o", Q8Mat), ("gu", Q8Mat), ("d", Q8Mat), ("bqkv", P), ("qn", P), ("kn", P),
                ("ln_att", P), ("ln2", P), ("ln_mlp", P), ("ln_next", P), ("rope", I), ("window", I)]


def q8_mat(c) -> Q8Mat:
    return Q8Mat(c.types.data_ptr(), c.off.data_ptr(), c.raw.data_ptr(), c.kinds, c.k, c.n, ptr(c.x8), ptr(c.x8_off))


class Q8Layers:
    """Every layer of a pass in one C call (layers_q8.c) for layers whose four matrices are all int8 blocks (RawCodes
    of one q8_mm variant): the same kernels and dtypes as core/runtime/fast.py's fused_layers, bit for bit."""

    def __init__(self, layers: list, final_w, variant_id: int, ropes: list, windows: list):
        self.keep = (layers, final_w)  # the pointers below point into these
        self.variant, self.ropes, self.windows = variant_id, ropes, windows
        nxt = [w["ln1"] for w in layers[1:]] + [final_w]
        self.table = (Q8Layer * len(layers))(*[
            Q8Layer(q8_mat(w["wqkv"].codes), q8_mat(w["wo"].codes), q8_mat(w["wgu"].codes), q8_mat(w["wd"].codes),
                    ptr(w["bqkv"]), ptr(w.get("qn")), ptr(w.get("kn")), ptr(w.get("ln_att")), w["ln2"].data_ptr(),
                    ptr(w.get("ln_mlp")), ln.data_ptr(), ropes.index(w["rope"]), windows.index(w["window"]))
            for w, ln in zip(layers, nxt)])
        self.ln1 = layers[0]["ln1"]

    def __call__(self, x, rope: dict, biases: dict, kt, v, start: int, a, dtype):
        """x [n, d] fp32, updated in place to the last layer's output; returns rms(x) * final_w as `dtype`."""
        n, d = x.shape
        out = torch.empty(n, d, dtype=dtype)
        cos = (P * len(self.ropes))(*[rope[r][0].data_ptr() for r in self.ropes])
        sin = (P * len(self.ropes))(*[rope[r][1].data_ptr() for r in self.ropes])
        bias = (P * len(self.windows))(*[biases[w].data_ptr() for w in self.windows])
        lib().layers_q8(self.variant, x.data_ptr(), n, d, self.table, len(self.table), self.ln1.data_ptr(), a.eps, cos,
                        sin, bias, kt.data_ptr(), v.data_ptr(), kt.shape[-1], start, a.n_heads, a.n_kv, a.hd, a.scale,
                        a.ffn, a.act_id, out.data_ptr(), is_bf16(out), torch.get_num_threads())
        return out
