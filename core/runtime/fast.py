"""FastRunner: a compact gpt-fast-style forward for llama-family models and gemma3, same interface as EagerRunner.

Weights come from the transformers model, re-laid out once (q|k|v and gate|up fused, transposed):
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
- codes (bf16 models converted from a GGUF, on AMX, AVX512-BF16 or AVX2: core/kernels/isa.py): in place of packed, each matrix whose Q4_K / Q6_K codes decode to
  its bf16 weights bit for bit is multiplied on those codes (core/kernels/gguf_codes.py): a third of the bytes, the
  same weights, each output row independent of the other rows at any row count.
Activations (residual stream, norms, rope) are fp32 whatever the weights' dtype, KV cache and attention fp32
(bf16 weights on the torch path: fp64); only the GEMM inputs are rounded to the weights' dtype, and forward() returns hidden
states in the model's dtype. With packed bf16 weights a token's logits are then bit-identical whether it is
verified in a tree / chain of up to PACK_ROWS tokens or decoded alone.
The KV cache is two static tensors, keys transposed [layers, kv_heads, head_dim, max_len] (scores are then a
vector loop over the keys) and values [layers, kv_heads, max_len, head_dim]: committed rows, then pending rows;
`commit` compacts the kept pending rows in place.
Between the GEMMs, fused C kernels (core/kernels/cpu_layer.c) replace ~10 small torch ops each where a C
compiler is at hand (`FastRunner.kernels`); the torch functions below stay as their reference and fallback.
"""
import functools
import os
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F

from core.kernels import cpu_layer, gguf_codes, isa
from core.runtime.runner import EagerRunner, window_of

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # static tables; dynamic/longrope depend on length
PACK_ROWS = 32  # packed products are called with at most this many rows (longer inputs are split)
PAD_TRIES = (1, 2, 4, 8, 16)  # row counts a short packed product may be padded to (see row_pad)


@dataclass
class FastConfig:
    max_len: int = 1024          # cache rows allocated up front; doubled when a forward needs more
    layout: str = "auto"         # auto (bf16: packed, else hybrid) | packed | blocked | hybrid | plain
    block_bytes: int = 0         # bytes per weight block; 0 = half the L2 cache
    check: bool = True           # make_runner('auto'): compare logits with transformers once
    kernels: bool = True         # fused C kernels between the GEMMs (core/kernels/cpu_layer.c) where they build
    weights: str = "model"       # layer GEMM weights: model (its dtype) | int8 | int4 (a draft model's; see QUANTS)
    codes: bool = field(default_factory=lambda: os.environ.get("SPECLENS_GGUF_CODES", "1") != "0")
    # ^ a GGUF model in bf16: products on its Q4_K / Q6_K codes, the same weights (gguf_codes); SPECLENS_GGUF_CODES=0 off


QUANTS = ("int8", "int4")  # weight-only, per output channel (int8) or per group of INT4_GROUP inputs (int4)
INT4_GROUP = 64
QUANT_ROWS = 6  # torch's quantized CPU products cost ~4 ms per row on a 0.5B layer stack: beyond this, the model's
                # own weights (0.5B, bf16: int4 22 vs 37 ms at 4 rows, 40 vs 38 ms at 8, 1071 vs 301 ms at 256)


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


# ---------------------------------------------------------------- support check + weights

def rope_subs(hf_cfg) -> dict:
    """{layer type: rope params} (gemma3: one per layer type) or {None: rope params}."""
    rope = getattr(hf_cfg, "rope_parameters", None) or getattr(hf_cfg, "rope_scaling", None) or {}
    return {k: v for k, v in rope.items() if isinstance(v, dict)} or {None: rope}


def rope_types(hf_cfg) -> list:
    return [r.get("rope_type", "default") for r in rope_subs(hf_cfg).values()]


@functools.cache
def packed_ok() -> bool:
    """Whether oneDNN packs bf16 linear weights on this CPU (avx512_bf16 / AMX) and the packed GEMM agrees
    with F.linear on a small probe."""
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


def unsupported_reason(model) -> str:
    """'' if FastRunner covers this model, else a one-line reason (shown by the UI)."""
    hf_cfg = model.config
    kind = getattr(hf_cfg, "model_type", "?")
    if kind not in ARCHS:
        return f"fast runtime does not cover model_type {kind!r} (covers {', '.join(ARCHS)})"
    if getattr(hf_cfg, "mlp_bias", False) or getattr(hf_cfg, "attn_logit_softcapping", None):
        return "fast runtime does not cover MLP biases or attention soft-capping"
    if getattr(hf_cfg, "use_bidirectional_attention", False):
        return "fast runtime does not cover bidirectional attention"
    bad = [t for t in rope_types(hf_cfg) if t not in ROPE_TYPES]
    if bad:
        return f"fast runtime does not cover rope_type {bad[0]!r}"
    if model.model.layers[0].self_attn.o_proj.bias is not None:
        return "fast runtime does not cover an o_proj bias"
    return ""


def arch_of(model) -> Arch:
    hf_cfg, layer, dtype = model.config, model.model.layers[0], model.get_output_embeddings().weight.dtype
    n_heads, n_kv = hf_cfg.num_attention_heads, hf_cfg.num_key_value_heads
    hd = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // n_heads
    gemma = hf_cfg.model_type == "gemma3_text"
    return Arch(hf_cfg.num_hidden_layers, hf_cfg.hidden_size, n_heads, n_kv, hd, hf_cfg.intermediate_size,
                hf_cfg.rms_norm_eps, layer.self_attn.scaling, layer.self_attn.q_proj.bias is not None,
                hasattr(layer.self_attn, "q_norm"), gemma,
                float(torch.tensor(hf_cfg.hidden_size ** 0.5, dtype=dtype)) if gemma else 1.0,  # as transformers rounds it
                1.0 if gemma else 0.0, layer.mlp.act_fn, act_index(hf_cfg))


def act_index(hf_cfg) -> int:
    from core.kernels.cpu_layer import ACTS
    return ACTS.get(getattr(hf_cfg, "hidden_activation", None) or getattr(hf_cfg, "hidden_act", None), -1)


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
         **{k: fuse_t(*lins) for k, lins in fused.items()},
         "bqkv": torch.cat([lin.bias.detach() for lin in fused["wqkv"]]).float() if a.qkv_bias else None,
         "window": window_of(hf_cfg, i), "rope": hf_cfg.layer_types[i] if None not in rope_subs(hf_cfg) else None}
    if a.qk_norm:
        w["qn"], w["kn"] = norm_w(att.q_norm, a), norm_w(att.k_norm, a)
    if a.sandwich:
        w["ln_att"] = norm_w(layer.post_attention_layernorm, a)
        w["ln_mlp"] = norm_w(layer.post_feedforward_layernorm, a)
    for k, lins in fused.items():
        if fc.layout in ("plain", "hybrid"):
            rebind(lins, w[k])
        w[k] = codes_forms(codes.get(f"{i}.{k}"), w[k].t()) or forms(w[k], fc)
    return w


def codes_forms(codes, w) -> "Forms | None":
    """Forms on the GGUF's codes when they decode to w [out, in] bit for bit, else None (the layout's forms)."""
    return Forms(codes=codes) if codes is not None and gguf_codes.exact(codes, w) else None


def codes_of(model, a: Arch, fc: FastConfig) -> dict:
    """{matrix: Codes} ('head', 'i.wqkv', ...) for a bf16 model converted from a GGUF (`speclens_gguf`, set by
    core.models.load_model) where a codes_mm variant runs (isa.codes_variant, fixed in each Codes); {} otherwise or with
    fc.codes off."""
    path, variant = getattr(model, "speclens_gguf", None), isa.codes_variant()
    if not (fc.codes and path and fc.layout == "packed" and fc.weights == "model" and variant != "none"):
        return {}
    return {key: c._replace(variant=variant) for key, c in gguf_codes.model_codes(path, a.n_layers).items()}


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
    codes: gguf_codes.Codes | None = None  # the GGUF's codes of exactly these bf16 weights (codes_mm)


def forms(wt, fc: FastConfig) -> Forms:
    """The layout's forms of one [in, out] matrix (quantized ones are added by quantized_layers)."""
    if fc.layout == "packed":
        return Forms(packed=pack(wt.t().contiguous()))
    b = block(wt, fc.block_bytes or l2_bytes() // 2) if fc.layout != "plain" else wt
    if b.dim() == 2:
        return Forms(plain=wt)
    return Forms(plain=wt if fc.layout == "hybrid" else None, blocked=b)


def quantize(w, kind: str) -> tuple:
    """Weight-only quantization of w [out, in]: int8 symmetric per output channel (torch's kernel); int4 asymmetric
    per group of INT4_GROUP inputs, w = q · scale + lo, for our AVX512-VNNI kernel where it is built, else torch's.
    (kind, implementation, tensors...)."""
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


def quant_mm(x, quant: tuple):
    """x [n, in] @ quantized w^T -> [n, out] (torch's kernels: in the scales' dtype; ours: fp32)."""
    kind, impl, *t = quant
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
    if fast_cfg.layout == "packed":
        w = head.weight.detach()
        return emb.weight.detach(), codes_forms(codes.get("head"), w) or Forms(packed=pack(w)), w
    return emb.weight.detach(), forms(head.weight.detach().t().contiguous(), fast_cfg), head.weight.detach()


@torch.no_grad()
def fast_weights(model, a: Arch, fast_cfg: FastConfig):
    """(embedding, head^T, head, per-layer dicts), built once per (model, layout, weights) and reused by every
    FastRunner on it (target + self-draft): in the plain layout the model's params point into them. Quantized
    weights extend the model's own (the LM head, what the draft heads study, is never quantized)."""
    memo = model.__dict__.setdefault("_speclens_fast", {})
    key = (fast_cfg.layout, fast_cfg.block_bytes, fast_cfg.weights, fast_cfg.codes, isa.codes_variant())
    if key not in memo and fast_cfg.weights in QUANTS:
        *head, layers = fast_weights(model, a, replace(fast_cfg, weights="model"))
        memo[key] = (*head, quantized_layers(model, layers, fast_cfg.weights))
    elif key not in memo:
        codes = codes_of(model, a, fast_cfg)
        memo[key] = (*head_weights(model, fast_cfg, codes),
                     [layer_weights(model, i, a, fast_cfg, codes) for i in range(a.n_layers)])
    return memo[key]


def rope_table(model, n: int, dtype, layer_type=None):
    """cos, sin [n, hd] from the model's own rotary module (covers its scaling type); sin sign-folded
    so that rotate_half(x) * sin == x.roll(hd/2) * sin_s."""
    pos = torch.arange(n).view(1, n)
    probe = torch.zeros(1, dtype=dtype)
    args = (layer_type,) if layer_type else ()
    cos, sin = model.model.rotary_emb(probe, pos, *args)
    cos, sin = cos[0].to(dtype), sin[0].to(dtype)
    half = sin.shape[-1] // 2
    return cos.contiguous(), torch.cat([-sin[:, :half], sin[:, half:]], -1).contiguous()


# ---------------------------------------------------------------- the forward (pure functions)

def mm(x, w: Forms):
    """x [n, in] @ w -> [n, out] in x's dtype, the product in the weights' dtype (x rounded to it): quantized
    for up to QUANT_ROWS rows, else on the GGUF's codes if set, else packed (oneDNN) if set, else plain for one row (GEMV), blocked for more (one
    bmm over L2-sized blocks)."""
    plain, blocked, packed, quant, codes = w
    if quant is not None and x.shape[0] <= QUANT_ROWS:
        return cast(quant_mm(x, quant), x.dtype)
    if codes is not None:  # each row comes out the same whatever n is
        return cast(gguf_codes.codes_mm(x, codes), x.dtype)
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


def rms(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rope(x, cos, sin):
    """x [n, heads, hd]; cos, sin [n, 1, hd]."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)


def attention(q, kt, v, bias, a: Arch, S: int):
    """q [n, H, hd]; kt [K, hd, max_len], v [K, max_len, hd] (rows < S valid); bias [G*n, S] additive -> [n, H*hd].

    GQA without repeat: query heads grouped per kv head, q -> [K, G*n, hd], scores [K, G*n, S]."""
    n, K, G = q.shape[0], a.n_kv, a.n_heads // a.n_kv
    qg = q.to(v.dtype).view(n, K, G, a.hd).permute(1, 2, 0, 3).reshape(K, G * n, a.hd)
    s = torch.baddbmm(bias, qg, kt[:, :, :S], alpha=a.scale)
    o = torch.bmm(s.softmax(-1), v[:, :S])
    return o.view(K, G, n, a.hd).permute(2, 0, 1, 3).reshape(n, a.n_heads * a.hd)


def layer_forward(x, w: dict, kt, vc, cos, sin, bias, start: int, a: Arch):
    """One decoder layer on x [n, d]; writes its new keys into kt columns, values into vc rows [start, start + n)."""
    n, H, K = x.shape[0], a.n_heads, a.n_kv
    h = rms(x, w["ln1"], a.eps)
    qkv = mm(h, w["wqkv"]) if w["bqkv"] is None else mm(h, w["wqkv"]) + w["bqkv"]
    qkv = qkv.view(n, H + 2 * K, a.hd)
    q, k, v = qkv[:, :H], qkv[:, H:H + K], qkv[:, H + K:]
    if a.qk_norm:
        q, k = rms(q, w["qn"], a.eps), rms(k, w["kn"], a.eps)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    kt[:, :, start:start + n], vc[:, start:start + n] = k.permute(1, 2, 0), v.transpose(0, 1)
    o = mm(attention(q, kt, vc, bias, a, start + n), w["wo"]).to(x.dtype)
    x = x + (rms(o, w["ln_att"], a.eps) if a.sandwich else o)
    gu = mm(rms(x, w["ln2"], a.eps), w["wgu"])
    m = mm(a.act(gu[:, :a.ffn]) * gu[:, a.ffn:], w["wd"])
    return x + (rms(m, w["ln_mlp"], a.eps) if a.sandwich else m)


def fused_layers(x, layers, kts, vs, rope, biases, start: int, final_w, a: Arch, dtype):
    """All decoder layers on x [n, d] fp32 (updated in place to the last layer's output) with the fused C
    kernels between the GEMMs: 4 GEMMs + 4 kernel calls per layer. Returns rms(x) * final_w as `dtype`."""
    from core.kernels import cpu_layer as k
    h = k.rms_cast(x, layers[0]["ln1"], a.eps, dtype)
    for i, (w, kt, v) in enumerate(zip(layers, kts, vs)):
        att = k.attend(mm(h, w["wqkv"]), w["bqkv"], w.get("qn"), w.get("kn"), a.eps, *rope[w["rope"]], kt, v,
                       start, biases[w["window"]], a, dtype)
        h = k.add_rms(x, mm(att, w["wo"]), w.get("ln_att"), w["ln2"], a.eps, dtype)
        m = mm(k.act_mul(mm(h, w["wgu"]), a.act_id, dtype), w["wd"])
        h = k.add_rms(x, m, w.get("ln_mlp"), layers[i + 1]["ln1"] if i + 1 < len(layers) else final_w, a.eps, dtype)
    return h


def tree_bias(mask, n: int, C: int, P: int, dtype):
    """Additive [n, C+P+n] mask (0 visible, -inf hidden): all committed rows, then `mask` [n, P+n]
    over pending+new (None: all pending, causal among new)."""
    if mask is None:
        mask = torch.ones(n, P + n, dtype=torch.bool).tril(P)
    bias = torch.zeros(n, C + P + n, dtype=dtype)
    bias[:, C:].masked_fill_(~mask.bool(), float("-inf"))
    return bias


def window_bias(bias, pos, row_pos, window: int):
    """bias plus -inf where a key lies `window` or more positions behind the query."""
    far = pos.view(-1, 1) - row_pos[:bias.shape[1]].view(1, -1) >= window
    return bias.masked_fill(far, float("-inf"))


# ---------------------------------------------------------------- the runner

class FastRunner:
    runtime_name = "fast"
    fallback_reason = ""

    def __init__(self, model, tokenizer=None, fast_cfg: FastConfig | None = None):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(reason)
        self.dtype = model.get_output_embeddings().weight.dtype  # weights; activations in self.act
        self.act = torch.promote_types(self.dtype, torch.float32)
        fast_cfg = fast_cfg or FastConfig()
        if fast_cfg.weights not in ("model", *QUANTS):
            raise ValueError(f"unknown weights {fast_cfg.weights!r}: use model, {' or '.join(QUANTS)}")
        self.arch = a = arch_of(model)
        self.kernels_reason = kernels_reason(a, self.dtype, fast_cfg)  # '' when the fused C kernels run
        self.kernels = self.kernels_reason == ""
        # torch path with bf16 weights: KV cache and attention in fp64, so that attention's rounding (which
        # depends on where the keys sit: a tree's gaps vs a contiguous chain) stays far below the bf16 rounding
        # of o_proj's input. The fused kernels sum over the visible keys only, in order: fp32 is exact there.
        self.att = torch.float64 if self.dtype.itemsize < 4 and not self.kernels else self.act
        self.model, self.tokenizer = model.eval(), tokenizer
        self.fast_cfg = replace(fast_cfg, layout=layout_of(fast_cfg, self.dtype))
        self.embed, self.head_t, self.head_weight, self.layers = fast_weights(model, a, self.fast_cfg)
        self.norm_w = norm_w(model.model.norm, a)
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.vocab_size, self.d = self.head_weight.shape
        self.config, self.device = model.config, self.head_weight.device
        self.exact_reason = exact_reason(self)  # '' when verify rows equal 1-token passes bit for bit
        used = [f.codes.variant for f in [self.head_t] + [w[k] for w in self.layers for k in MATRICES] if f.codes]
        self.on_codes, self.codes_variant = bool(used), isa.LABELS[used[0]] if used else ""  # e.g. avx512-bf16
        self._alloc(self.fast_cfg.max_len)
        self.reset()

    def _alloc(self, max_len: int, keep_rows: int = 0):
        """(Re)allocate the KV cache, the row -> position map and the rope tables for max_len rows."""
        a = self.arch
        kt = torch.zeros(a.n_layers, a.n_kv, a.hd, max_len, dtype=self.att)
        v = torch.zeros(a.n_layers, a.n_kv, max_len, a.hd, dtype=self.att)
        row_pos = torch.zeros(max_len, dtype=torch.long)
        if keep_rows:
            kt[..., :keep_rows], v[:, :, :keep_rows] = self.kt[..., :keep_rows], self.v[:, :, :keep_rows]
            row_pos[:keep_rows] = self.row_pos[:keep_rows]
        self.kt, self.v, self.row_pos, self.max_len = kt, v, row_pos, max_len
        self.rope = {w["rope"]: rope_table(self.model, max_len, self.act, w["rope"]) for w in self.layers}

    def reset(self) -> None:
        self.n_committed = 0
        self.n_pending = 0

    @torch.no_grad()
    def forward(self, ids, pos, mask=None, embeds=None):
        """ids, pos: [n]; mask: bool [n, n_pending + n] (None = all pending + causal); embeds [n, d]: inputs
        in place of the ids' embeddings (an EAGLE drafter's fc output).
        Returns (hidden after the final norm [n, d], features before it [n, d]) in the model's dtype;
        new entries become pending."""
        n, C, P, a = ids.shape[0], self.n_committed, self.n_pending, self.arch
        start = C + P
        need = max(start + n, int(pos.max()) + 1)  # rows, and rope rows (a drafter's positions run one ahead)
        if need > self.max_len:
            self._alloc(2 * need, keep_rows=start)
        self.row_pos[start:start + n] = pos
        bias = self._biases(tree_bias(mask, n, C, P, self.att), pos, start + n)
        if embeds is None:
            x = F.embedding(ids, self.embed).to(self.act)
            x = x * a.embed_scale if a.embed_scale != 1.0 else x
        else:
            x = embeds.to(self.act, copy=True).contiguous()  # the fused kernels update x in place
        self.n_pending += n
        if self.kernels:
            rope = {k: (cos[pos], sin[pos]) for k, (cos, sin) in self.rope.items()}
            return (fused_layers(x, self.layers, self.kt, self.v, rope, bias, start, self.norm_w, a, self.dtype),
                    x.to(self.dtype))
        rope = {k: (cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)) for k, (cos, sin) in self.rope.items()}
        for w, kt, v in zip(self.layers, self.kt, self.v):
            x = layer_forward(x, w, kt, v, *rope[w["rope"]], bias[w["window"]], start, a)
        return rms(x, self.norm_w, a.eps).to(self.dtype), x.to(self.dtype)

    def _biases(self, bias, pos, S: int) -> dict:
        """window -> additive bias [n, S] (fused kernels) or [G*n, S] (torch path: query rows repeated for
        the G query heads of a kv head)."""
        G = 1 if self.kernels else self.arch.n_heads // self.arch.n_kv
        out = {}
        for w in {w["window"] for w in self.layers}:
            out[w] = (window_bias(bias, pos, self.row_pos, w) if w and S > w else bias).repeat(G, 1)
        return out

    def logits(self, hidden):
        """[n, d] @ [d, V] -> fp32 [n, V] (with the model's final soft-cap, if any)."""
        z = mm(hidden.to(self.act), self.head_t).float()
        return torch.tanh(z / self.softcap) * self.softcap if self.softcap else z

    def commit(self, keep) -> None:
        """Keep pending entries `keep` (indices into the pending region, in order); drop the rest."""
        keep = torch.as_tensor(keep, dtype=torch.long).view(-1)
        C, m = self.n_committed, keep.numel()
        if keep.tolist() != list(range(m)):
            self.kt[..., C:C + m], self.v[:, :, C:C + m] = self.kt[..., C + keep], self.v[:, :, C + keep]
            self.row_pos[C:C + m] = self.row_pos[C + keep]
        self.n_committed += m
        self.n_pending = 0


# ---------------------------------------------------------------- choosing a runtime

def kernels_reason(a: Arch, dtype, fast_cfg: FastConfig) -> str:
    """'' if the fused C kernels serve a model of this architecture and weight dtype, else why the runner keeps
    its torch path."""
    from core.kernels import cpu_layer
    if not fast_cfg.kernels:
        return "fused CPU kernels turned off"
    if a.act_id < 0:
        return "the fused CPU kernels do not cover this MLP activation"
    if dtype not in (torch.float32, torch.bfloat16):
        return "the fused CPU kernels cover fp32 and bf16 weights"
    if a.hd % 16:
        return "the fused CPU kernels need a head_dim that is a multiple of 16"
    return "" if cpu_layer.lib() is not None else cpu_layer.why_not()


def exact_reason(runner) -> str:
    """'' when a token's logits are bit-identical whatever the number of tokens sharing its forward (greedy
    speculation then equals greedy decoding bit for bit), else why they may differ by rounding."""
    if runner.fast_cfg.weights != "model":
        return f"{runner.fast_cfg.weights} weights (a draft model's): their products are not checked for exactness"
    if runner.fast_cfg.layout != "packed":
        return "1-token and batched GEMMs sum in different orders: lossless up to rounding, ties reported"
    if not runner.kernels:
        return "attention without the fused kernels sums per pass size: lossless up to rounding, ties reported"
    forms = [runner.head_t] + [w[k] for w in runner.layers for k in MATRICES]
    shapes = {f.packed.shape for f in forms if f.codes is None}  # codes_mm rows are stable by construction
    if not all(exact_pads(shapes).values()):
        return "oneDNN's bf16 products depend on the row count on this CPU: lossless up to rounding, ties reported"
    return ""


def logits_gap(model, runner, n: int = 5) -> float:
    """max |fast - transformers| logits on a short causal prefill of tokens spread over the vocabulary,
    relative to the largest logit."""
    ids = (torch.arange(n) * 7919 + runner.vocab_size // 3) % runner.vocab_size
    with torch.no_grad():
        ref = model(input_ids=ids.view(1, n), use_cache=False).logits[0].float()
    runner.reset()
    hid, _ = runner.forward(ids, torch.arange(n))
    runner.reset()
    return float((runner.logits(hid) - ref).abs().max() / ref.abs().max().clamp(min=1.0))


def gap_tolerance(dtype) -> float:
    """fp32: 1e-3; bf16: 32 eps = 0.25 (transformers' own bf16 forward, with its bf16 residual stream, is
    5-7 % off on SmolLM2 / gemma-3-270m and 17 % off fp32 on Qwen2.5-Coder-0.5B, where ours is 1.6 % off);
    a real mismatch is O(1)."""
    return max(1e-3, 32 * torch.finfo(dtype).eps)


def make_runner(model, tokenizer=None, runtime: str = "auto", fast_cfg: FastConfig | None = None):
    """'eager' | 'fast' | 'auto' (fast where it covers the architecture and agrees with transformers,
    else eager with `fallback_reason` saying why). fast_cfg.weights other than "model" quantize the fast
    runner's weights (an eager runner keeps the model's)."""
    from core.errors import SpecError

    if runtime not in ("auto", "eager", "fast"):
        raise SpecError(f"unknown runtime {runtime!r}: use auto, eager or fast")
    if runtime == "eager":
        return EagerRunner(model, tokenizer)
    fast_cfg = fast_cfg or FastConfig()
    reason = unsupported_reason(model)
    if not reason and next(model.parameters()).device.type != "cpu":
        reason = "fast runtime is CPU-only; the eager path uses the accelerator"
    if reason and runtime == "fast":
        raise SpecError(reason)
    if not reason:
        try:
            # checked against transformers in the model's own weights: quantizing is a draft's deliberate choice
            runner = FastRunner(model, tokenizer, replace(fast_cfg, weights="model"))
            gap = logits_gap(model, runner) if fast_cfg.check and runtime == "auto" else 0.0
            if fast_cfg.weights != "model" and gap <= gap_tolerance(runner.dtype):
                runner = FastRunner(model, tokenizer, fast_cfg)  # shares the checked runner's weight forms
        except (RuntimeError, ValueError, AttributeError, TypeError) as err:
            if runtime == "fast":
                raise SpecError(f"fast runtime failed on this model: {err}") from None
            runner, gap, reason = None, 0.0, f"fast runtime failed on this model: {err}"
        if runner is not None and gap <= gap_tolerance(runner.dtype):
            return runner
        reason = reason or f"fast runtime logits differ from transformers by {gap:.2g} (relative)"
    runner = EagerRunner(model, tokenizer)
    runner.fallback_reason = reason
    return runner
