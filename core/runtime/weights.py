"""The fast runtime's weights: a transformers model's matrices re-laid out once (q|k|v and gate|up fused, transposed),
in one of these forms, and `mm`, which multiplies by whichever form a matrix has:
- plain: [in, out] contiguous, and the transformers layer params rebound to views of it (no second copy);
  best for 1 token (BLAS GEMV). The LM head keeps its row-major [V, d] (draft heads gather its rows) beside
  a transposed copy for the GEMV.
- blocked: each [in, out] matrix cut into column blocks that fit in half the L2 cache, stored
  [n_blocks, in, block] and multiplied with one bmm. BLAS packs the right-hand side of a small-M GEMM;
  for a whole matrix that is a second trip through DRAM, for an L2-sized block it is not, so a 16-token
  verify streams each weight about once, like the 1-token GEMV. Costs one extra copy of the weights.
- hybrid: both, plain for n = 1 and blocked for n > 1 (same memory as blocked).
- packed (bf16 models): oneDNN's own blocked weight format, one GEMM call per matrix; AMX makes its cost
  nearly flat in the row count up to 16, and each output row does not depend on the other rows.
auto = packed for a bf16 model where oneDNN can pack bf16, else hybrid (measured fastest at n = 1 in fp32, and
the same as blocked for n > 1).
- codes (models converted from a GGUF: `codes_math`): bf16 (a bf16 model, on AMX, AVX512-BF16 or
  AVX2: core/kernels/cpu/isa.py): each matrix whose Q4_K / Q6_K codes decode to its bf16 weights bit for bit is
  multiplied on those codes (core/kernels/cpu/gguf_codes.py): a third of the bytes, the same weights. int8 (any
  dtype and layout, AVX2): each matrix whose GGUF blocks match its weights is multiplied on those blocks with int8
  activations, llama.cpp's arithmetic (core/kernels/cpu/gguf_q8.py). Either way each output row is independent of
  the other rows at any row count.
- int8 / int4 (a draft model's layers): weight-only quantized, per output channel or per group of INT4_GROUP inputs
  (core/runtime/quant.py).
With packed bf16 weights a token's logits are bit-identical whether it is verified in a tree / chain of up to PACK_ROWS
tokens or decoded alone.
"""
import functools
from dataclasses import replace
from typing import NamedTuple

import torch
import torch.nn.functional as F

from core.errors import SpecError
from core.kernels.cpu import cpu_layer, gguf_codes, gguf_q8, isa
from core.runtime.arch import rope_subs
from core.runtime.config import Arch, FastConfig
from core.runtime.quant import QUANTS, quantize
from core.runtime.runner import window_of

PACK_ROWS = 32  # packed products are called with at most this many rows (longer inputs are split)


PAD_TRIES = (1, 2, 4, 8, 16)  # row counts a short packed product may be padded to (see row_pad)


PREFILL_ROWS = 8  # a prompt's pass of this many rows or more: the plain copy beside int8 blocks (mm, prefill_on_plain)
QUANT_ROWS = 6  # torch's quantized CPU products cost ~4 ms per row on a 0.5B layer stack: beyond this, the model's own forms


@functools.cache
def packed_ok() -> bool:
    """Whether oneDNN packs bf16 linear weights on this CPU (avx512_bf16 / AMX) and the packed GEMM agrees
    with F.linear on a small probe; never under SPECLENS_CPU_ISA=avx2 or none, which stand for a CPU without them
    (so the capped run takes an AVX2-only CPU's fp32 model, as that CPU would)."""
    if not isa.allowed("avx512"):
        return False
    try:
        if not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            return False
        g = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 40, generator=g).bfloat16(), torch.randn(3, 40, generator=g).bfloat16()
        return torch.allclose(packed_mm(x, pack(w)).float(), F.linear(x, w).float(), atol=0.05, rtol=0.02)
    except (RuntimeError, AttributeError):
        return False


def layout_of(fast_cfg: FastConfig, dtype) -> str:
    """The layout `fast_cfg` asks for, with auto resolved for weights of `dtype`."""
    packable = dtype == torch.bfloat16 and packed_ok()
    if fast_cfg.layout == "auto":
        return "packed" if packable else "hybrid"
    if fast_cfg.layout not in ("packed", "blocked", "hybrid", "plain"):
        raise ValueError(f"unknown layout {fast_cfg.layout!r}")
    if fast_cfg.layout == "packed" and not packable:
        raise ValueError("the packed layout needs bf16 weights and oneDNN bf16 (avx512_bf16 or AMX)")
    return fast_cfg.layout


def fuse_t(*linears):
    """[in, sum(out)] contiguous: the weights of `linears` side by side, transposed."""
    return torch.cat([lin.weight.detach() for lin in linears], 0).t().contiguous()


def l2_bytes() -> int:
    try:
        size = open("/sys/devices/system/cpu/cpu0/cache/index2/size").read().strip().upper()
        return int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]] if size[-1] in "KM" else int(size)
    except (OSError, ValueError, KeyError):
        return 1 << 20


def block(wt, budget: int):
    """[in, out] -> [out / bs, in, bs] with bs the largest multiple of 8 dividing `out` whose block fits
    `budget` bytes; unchanged when no such split exists or one block holds everything."""
    k, n = wt.shape
    fits = [bs for bs in range(8, n, 8) if n % bs == 0 and k * bs * wt.element_size() <= budget]
    if not fits:
        return wt
    bs = fits[-1]
    return wt.view(k, n // bs, bs).permute(1, 0, 2).contiguous()


@functools.cache
def row_pad(out: int, k: int, threads: int) -> int:
    """The fewest rows m that a packed bf16 product [n, k] @ [k, out] must be called with (short inputs padded
    with zero rows) for each output row to be bit-identical whatever n in 1..PACK_ROWS + 1 shares the call;
    0 if no m in PAD_TRIES does. oneDNN picks its kernel (and so the reduction order over k) by the row count:
    on avx512_bf16 without AMX a 1-row product with k = 1536 sums in another order than 2+ rows do.
    Probed once per (shape, thread count) on random data; the order depends on shapes, not values."""
    g = torch.Generator().manual_seed(0)
    w = pack(torch.randn(out, k, generator=g).bfloat16())
    x = torch.randn(PACK_ROWS + 1, k, generator=g).bfloat16()
    for m in PAD_TRIES:
        alone = torch.cat([padded_mm(x[i:i + 1], w, m) for i in range(x.shape[0])])
        if all(torch.equal(chunked_mm(x[:n], w, m), alone[:n]) for n in range(2, x.shape[0] + 1)):
            return m
    return 0


def padded_mm(x, packed, m: int):
    """packed_mm on x [n, in] called with at least m rows (zero rows appended, their outputs dropped)."""
    n = x.shape[0]
    if n >= m:
        return packed_mm(x, packed)
    return packed_mm(torch.cat([x, x.new_zeros(m - n, x.shape[1])]), packed)[:n]


def chunked_mm(x, packed, m: int):
    """x [n, in] @ packed^T in calls of at most PACK_ROWS rows, each padded to m rows."""
    if x.shape[0] <= PACK_ROWS:
        return padded_mm(x, packed, m)
    return torch.cat([padded_mm(c, packed, m) for c in x.split(PACK_ROWS)])


def exact_pads(shapes) -> dict:
    """{(out, in): row_pad} for the packed weight shapes at the current thread count."""
    return {s: row_pad(*s, torch.get_num_threads()) for s in shapes}


def pack(w):
    """[out, in] bf16 -> oneDNN's blocked weight format (an opaque tensor), packed for up to 16 rows."""
    return torch.ops.mkldnn._reorder_linear_weight(w, 16)


def packed_mm(x, packed):
    """x [n, in] bf16 @ packed^T -> [n, out] bf16."""
    return torch.ops.mkldnn._linear_pointwise.default(x, packed, None, "none", [], "")


def rebind(linears, wt):
    """Point each linear's weight at its slice of the fused transposed buffer (a strided [out, in] view)."""
    at = 0
    for lin in linears:
        out = lin.weight.shape[0]
        lin.weight.data = wt[:, at:at + out].t()
        at += out


def norm_w(norm, a: Arch):
    """The norm's scale in fp32 (the activation dtype); gemma: 1 + w."""
    w = norm.weight.detach().float()
    return w + a.norm_offset if a.norm_offset else w


MATRICES = ("wqkv", "wo", "wgu", "wd")  # a layer's fused matrices (linears)


def linears(layer) -> dict:
    """{fused matrix name: the layer's linears fused into it, in order}."""
    att, mlp = layer.self_attn, layer.mlp
    return {"wqkv": (att.q_proj, att.k_proj, att.v_proj), "wo": (att.o_proj,),
            "wgu": (mlp.gate_proj, mlp.up_proj), "wd": (mlp.down_proj,)}


def layer_weights(model, i: int, a: Arch, fc: FastConfig, codes: dict) -> dict:
    layer, hf_cfg = model.model.layers[i], model.config
    att, fused = layer.self_attn, linears(layer)
    pre_mlp = layer.pre_feedforward_layernorm if a.sandwich else layer.post_attention_layernorm
    w = {"ln1": norm_w(layer.input_layernorm, a), "ln2": norm_w(pre_mlp, a),
         "bqkv": torch.cat([lin.bias.detach() for lin in fused["wqkv"]]).float() if a.qkv_bias else None,
         "bo": att.o_proj.bias.detach().float() if att.o_proj.bias is not None else None,  # a Llama attention_bias layer
         "window": window_of(hf_cfg, i), "rope": hf_cfg.layer_types[i] if None not in rope_subs(hf_cfg) else None}
    if a.qk_norm:
        w["qn"], w["kn"] = norm_w(att.q_norm, a), norm_w(att.k_norm, a)
    if a.sandwich:
        w["ln_att"] = norm_w(layer.post_attention_layernorm, a)
        w["ln_mlp"] = norm_w(layer.post_feedforward_layernorm, a)
    for k, lins in fused.items():
        on_codes = codes.get(f"{i}.{k}")
        if isinstance(on_codes, list):  # raw blocks, matched on the linears' own rows, beside the plain fused copy
            w[k] = codes_forms(on_codes, [lin.weight.detach() for lin in lins])  # (which the prompt's prefill runs)
            if w[k] is not None:
                wt = fuse_t(*lins)
                rebind(lins, wt)  # the model's own weights become views of it: no second copy
                w[k] = w[k]._replace(plain=wt)
                continue
            on_codes = None
        wt = fuse_t(*lins)
        if fc.layout in ("plain", "hybrid"):
            rebind(lins, wt)
        w[k] = codes_forms(on_codes, wt.t()) or forms(wt, fc)
    return w


def codes_forms(codes, w) -> "Forms | None":
    """Forms on the GGUF's codes when they stand for w [out, in] (bf16 codes: bit for bit; raw blocks: sampled rows of
    every part, w also a list of the [out_i, in] matrices it stacks), else None (the layout's forms)."""
    if isinstance(codes, list):  # raw blocks: candidate row orders
        raw = gguf_q8.first_match(codes, w)
        return Forms(codes=raw) if raw is not None else None
    return Forms(codes=codes) if codes is not None and gguf_codes.exact(codes, w) else None


CODES_MATH = ("auto", "bf16", "int8")


def codes_math(fc: FastConfig, dtype=torch.bfloat16) -> str:
    """Which GGUF products run for a model of `dtype` ('bf16', 'int8' or '' for none here). auto: the int8 blocks for a
    bf16 model wherever q8_mm runs, AMX included (the 1.5B's plain decoding on an AMX Xeon: 19.0 tok/s on them against
    11.1 on its bf16 codes, whose NanoSpec ran 17.8: docs/runtime.md), and for an fp32 model where AVX2 is the best
    codes variant; an fp32 model on AMX / AVX512-BF16 keeps its fp32 products. bf16: the bf16 codes (isa.codes_variant),
    the matrices of other types on their int8 blocks (`codes_of`). Where both arithmetics have been calibrated for
    a model pair, Pipeline.load sets the faster one instead of this rule (core/cost/choose.py)."""
    if fc.codes_math not in CODES_MATH:
        raise SpecError(f"SPECLENS_GGUF_MATH={fc.codes_math!r}: use one of {', '.join(CODES_MATH)}")
    variant, bf16 = isa.codes_variant(), dtype == torch.bfloat16
    if fc.codes_math == "bf16":
        return "bf16" if variant != "none" and bf16 else ""
    auto_int8 = variant == "avx2" or (variant in ("avx512", "amx") and bf16)
    return "int8" if gguf_q8.available() and (fc.codes_math == "int8" or auto_int8) else ""


def labels_math(codes_variant: str) -> str:
    """A runner's codes labels ('amx-bf16 + avx512-vnni', ...) -> its arithmetic: 'int8' where every label names a
    q8_mm variant, else 'bf16'."""
    return "int8" if all(gguf_q8.is_label(v) for v in codes_variant.split(" + ")) else "bf16"


def maths_here(dtype) -> list:
    """The GGUF products that run on this CPU (under SPECLENS_CPU_ISA) for a model of dtype: 'bf16', 'int8'."""
    return [m for m, ok in (("bf16", dtype == torch.bfloat16 and isa.codes_variant() != "none"),
                            ("int8", gguf_q8.available())) if ok]


def codes_of(model, a: Arch, fc: FastConfig) -> dict:
    """{matrix: Codes | [RawCodes builders]} ('head', 'i.wqkv', ...) for a model converted from a GGUF (`speclens_gguf`,
    set by core.models.load_model), in the products `codes_math` picks; {} otherwise or with fc.codes off."""
    path, dtype = getattr(model, "speclens_gguf", None), model.get_output_embeddings().weight.dtype
    math = codes_math(fc, dtype) if fc.codes and path and fc.weights == "model" else ""
    if math == "int8":
        return gguf_q8.model_raw(path, a.n_layers, a.n_heads, a.n_kv)
    if math == "bf16":
        variant = isa.codes_variant()
        bf16 = {key: c._replace(variant=variant) for key, c in gguf_codes.model_codes(path, a.n_layers).items()}
        # the matrices without bf16 codes (Q4_1, Q5_0, Q8_0, ...: all of SmolLM2's) on their int8 blocks rather than on
        # the layout's copy of the weights: 1.9x on SmolLM2's decode on an AMX Xeon (docs/runtime.md)
        rest = gguf_q8.model_raw(path, a.n_layers, a.n_heads, a.n_kv) if gguf_q8.available() else {}
        return rest | bf16
    return {}


def has_blocks(model) -> bool:
    """Whether a model was converted from a GGUF whose blocks q8_mm multiplies here (core.models.load_model)."""
    return bool(getattr(model, "speclens_gguf", None)) and gguf_q8.available()


def quantized_layers(model, layers: list, kind: str) -> list:
    """The per-layer dicts with each matrix's `kind` quantization beside its layout's forms (shared, not copied:
    they serve products of more than QUANT_ROWS rows)."""
    return [{**w, **{k: w[k]._replace(quant=quantize(torch.cat([lin.weight.detach() for lin in lins]), kind))
                     for k, lins in linears(layer).items()}}
            for w, layer in zip(layers, model.model.layers)]


class Forms(NamedTuple):
    """One weight matrix in the forms `mm` multiplies by; the layout decides which are set."""
    plain: torch.Tensor | None = None    # [in, out]
    blocked: torch.Tensor | None = None  # [n_blocks, in, bs]
    packed: torch.Tensor | None = None   # oneDNN's opaque bf16 format
    quant: tuple | None = None           # (kind, implementation, tensors...): see quantize
    codes: "gguf_codes.Codes | gguf_q8.RawCodes | None" = None  # the GGUF's codes of these weights


def forms(wt, fc: FastConfig) -> Forms:
    """The layout's forms of one [in, out] matrix (quantized ones are added by quantized_layers)."""
    if fc.layout == "packed":
        return Forms(packed=pack(wt.t().contiguous()))
    b = block(wt, fc.block_bytes or l2_bytes() // 2) if fc.layout != "plain" else wt
    if b.dim() == 2:
        return Forms(plain=wt)
    return Forms(plain=wt if fc.layout == "hybrid" else None, blocked=b)


def quant_mm(x, quant: tuple):
    """x [n, in] @ quantized w^T -> [n, out] (torch's kernels: in the scales' dtype; ours: fp32)."""
    kind, impl, *t = quant
    if impl == "q8":
        return gguf_q8.q8_mm(x, t[0])
    if impl == "vnni":
        return cpu_layer.int4_mm(x, *t)
    if kind == "int8":
        return torch._weight_int8pack_mm(cast(x, t[1].dtype), *t)
    return torch._weight_int4pack_mm_for_cpu(cast(x, t[2].dtype), *t)


def head_weights(model, fast_cfg: FastConfig, codes: dict):
    """(embedding [V, d], head^T forms (see `forms`), head [V, d]). The model's head stays row-major in every
    layout: the draft heads gather its rows (a column-major view makes each row 576 cache misses) and the
    embedding (often tied) gathers them too; the GEMV reads its own transposed copy."""
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    w = head.weight.detach()
    on_codes = codes_forms(codes.get("head"), w)
    if on_codes is not None and isinstance(on_codes.codes, gguf_q8.RawCodes):
        on_codes = on_codes._replace(plain=w.t())  # a view, for the prompt's rows (mm's prefill)
    if fast_cfg.layout == "packed":
        return emb.weight.detach(), on_codes or Forms(packed=pack(w)), w
    return emb.weight.detach(), on_codes or forms(w.t().contiguous(), fast_cfg), w


@torch.no_grad()
def fast_weights(model, a: Arch, fast_cfg: FastConfig):
    """(embedding, head^T, head, per-layer dicts), built once per (model, layout, weights) and reused by every
    FastRunner on it (target + self-draft): in the plain layout the model's params point into them. Quantized
    weights extend the model's own (the LM head, what the draft heads study, is never quantized)."""
    memo = model.__dict__.setdefault("_speclens_fast", {})
    key = (fast_cfg.layout, fast_cfg.block_bytes, fast_cfg.weights, fast_cfg.codes, fast_cfg.codes_math,
           isa.codes_variant(), isa.cap())
    if key not in memo and fast_cfg.weights in QUANTS:
        *head, layers = fast_weights(model, a, replace(fast_cfg, weights="model"))
        memo[key] = (*head, quantized_layers(model, layers, fast_cfg.weights))
    elif key not in memo:
        codes = codes_of(model, a, fast_cfg)
        memo[key] = (*head_weights(model, fast_cfg, codes),
                     [layer_weights(model, i, a, fast_cfg, codes) for i in range(a.n_layers)])
    return memo[key]


def prefill_on_plain() -> bool:
    """Whether a prompt's pass multiplies by the plain copy beside int8 blocks: where q8_mm runs on AMX tiles, beside
    oneDNN's bf16 AMX products. Elsewhere the int8 blocks take the prompt faster (an AVX-512 Zen 4 without AMX: the
    1.5B's prompt of 16 / 64 / 160 rows in 0.35 / 0.62 / 0.75 of the plain copy's time, docs/runtime.md)."""
    return isa.q8_variant() == "amx"


def mm(x, w: Forms, prefill: bool = False):
    """x [n, in] @ w -> [n, out] in x's dtype, the product in the weights' dtype (x rounded to it): quantized
    (q8_mm's blocks for any number of rows, the others for up to QUANT_ROWS), else on the GGUF's codes if set, else
    packed (oneDNN) if set, else plain for one row (GEMV), blocked for more (one bmm over L2-sized blocks). prefill
    (the prompt's pass of PREFILL_ROWS rows or more, the same pass for plain decoding and every method): the plain
    copy beside int8 blocks where prefill_on_plain()."""
    plain, blocked, packed, quant, codes = w
    if quant is not None and (x.shape[0] <= QUANT_ROWS or quant[1] == "q8"):
        return cast(quant_mm(x, quant), x.dtype)
    if prefill and plain is not None and isinstance(codes, gguf_q8.RawCodes) and x.shape[0] >= PREFILL_ROWS \
            and prefill_on_plain():
        return cast(cast(x, plain.dtype) @ plain, x.dtype)
    if codes is not None:  # each row comes out the same whatever n is
        product = gguf_q8.q8_mm if isinstance(codes, gguf_q8.RawCodes) else gguf_codes.codes_mm
        return cast(product(x, codes), x.dtype)
    if packed is not None:  # padded to row_pad rows: each row then comes out the same whatever n is
        m = row_pad(*packed.shape, torch.get_num_threads()) or 1
        return cast(chunked_mm(cast(x, packed.dtype), packed, m), x.dtype)
    if blocked is None or (plain is not None and x.shape[0] == 1):
        return cast(cast(x, plain.dtype) @ plain, x.dtype)
    nb, k, bs = blocked.shape
    xb = cast(x, blocked.dtype).expand(nb, x.shape[0], k)
    return cast(torch.bmm(xb, blocked).transpose(0, 1).reshape(x.shape[0], nb * bs), x.dtype)


def cast(t, dtype):
    """t in `dtype`, without the ~5 us that a no-op `.to` costs."""
    return t if t.dtype == dtype else t.to(dtype)
