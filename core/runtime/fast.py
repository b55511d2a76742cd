"""FastRunner: a compact gpt-fast-style forward for llama-family models and gemma3, same interface as EagerRunner,
on weights re-laid out once (core/runtime/weights.py).

Activations (residual stream, norms, rope) are fp32 whatever the weights' dtype, KV cache and attention fp32
(bf16 weights on the torch path: fp64); only the GEMM inputs are rounded to the weights' dtype, and forward() returns hidden
states in the model's dtype.
The KV cache is two static tensors, keys transposed [layers, kv_heads, head_dim, max_len] (scores are then a
vector loop over the keys) and values [layers, kv_heads, max_len, head_dim]: committed rows, then pending rows;
`commit` compacts the kept pending rows in place.
Between the GEMMs, fused C kernels (core/kernels/cpu/layer_ops.c) replace ~10 small torch ops each where a C
compiler is at hand (`FastRunner.kernels`); the torch functions below stay as their reference and fallback.
`make_runner` chooses the runtime (fast where it is supported and agrees with transformers, else eager).
"""
from dataclasses import replace

import torch
import torch.nn.functional as F

from core.kernels.cpu import cpu_layer, gguf_q8, isa
from core.runtime.arch import arch_of, rope_table, unsupported_reason
from core.runtime.config import Arch, FastConfig
from core.runtime.quant import QUANTS
from core.runtime.runner import EagerRunner, top2
from core.runtime.weights import (
    MATRICES,
    PREFILL_ROWS,
    prefill_on_plain,
    exact_pads,
    fast_weights,
    layout_of,
    mm,
    norm_w,
)


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
    n, H, K, pre = x.shape[0], a.n_heads, a.n_kv, start == 0
    h = rms(x, w["ln1"], a.eps)
    qkv = mm(h, w["wqkv"], pre) if w["bqkv"] is None else mm(h, w["wqkv"], pre) + w["bqkv"]
    qkv = qkv.view(n, H + 2 * K, a.hd)
    q, k, v = qkv[:, :H], qkv[:, H:H + K], qkv[:, H + K:]
    if a.qk_norm:
        q, k = rms(q, w["qn"], a.eps), rms(k, w["kn"], a.eps)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    kt[:, :, start:start + n], vc[:, start:start + n] = k.permute(1, 2, 0), v.transpose(0, 1)
    o = mm(attention(q, kt, vc, bias, a, start + n), w["wo"], pre).to(x.dtype)
    o = o if w["bo"] is None else o + w["bo"]
    x = x + (rms(o, w["ln_att"], a.eps) if a.sandwich else o)
    gu = mm(rms(x, w["ln2"], a.eps), w["wgu"], pre)
    m = mm(a.act(gu[:, :a.ffn]) * gu[:, a.ffn:], w["wd"], pre)
    return x + (rms(m, w["ln_mlp"], a.eps) if a.sandwich else m)


def fused_layers(x, layers, kts, vs, rope, biases, start: int, final_w, a: Arch, dtype):
    """All decoder layers on x [n, d] fp32 (updated in place to the last layer's output) with the fused C
    kernels between the GEMMs: 4 GEMMs + 4 kernel calls per layer. Returns rms(x) * final_w as `dtype`."""
    k = cpu_layer
    h, pre = k.rms_cast(x, layers[0]["ln1"], a.eps, dtype), start == 0
    for i, (w, kt, v) in enumerate(zip(layers, kts, vs)):
        att = k.attend(mm(h, w["wqkv"], pre), w["bqkv"], w.get("qn"), w.get("kn"), a.eps, *rope[w["rope"]], kt, v,
                       start, biases[w["window"]], a, dtype)
        o = mm(att, w["wo"], pre)
        h = k.add_rms(x, o if w["bo"] is None else o.float() + w["bo"], w.get("ln_att"), w["ln2"], a.eps, dtype)
        m = mm(k.act_mul(mm(h, w["wgu"], pre), a.act_id, dtype), w["wd"], pre)
        h = k.add_rms(x, m, w.get("ln_mlp"), layers[i + 1]["ln1"] if i + 1 < len(layers) else final_w, a.eps, dtype)
    return h


def kernels_id() -> str:
    """The CPU kernels' code, as a digest of their sources (cpu_layer.sources_id)."""
    return cpu_layer.sources_id()


def one_call(runner) -> "cpu_layer.Q8Layers | None":
    """Every layer in one C call where the fused kernels run and all of a runner's layer matrices are int8 blocks of
    one q8_mm variant (none quantized for the draft), with fp32 or bf16 weights and no o_proj bias; None otherwise."""
    if not (runner.kernels and runner.fast_cfg.one_call and runner.dtype in (torch.float32, torch.bfloat16)):
        return None
    if any(w["bo"] is not None for w in runner.layers):
        return None
    forms = [w[k] for w in runner.layers for k in MATRICES]
    if not all(isinstance(f.codes, gguf_q8.RawCodes) and f.quant is None for f in forms):
        return None
    variants = {f.codes.variant or isa.q8_variant() for f in forms}
    if len(variants) != 1 or (v := variants.pop()) not in isa.q8_variants():
        return None
    ropes, windows = sorted({w["rope"] for w in runner.layers}, key=str), sorted({w["window"] for w in runner.layers}, key=str)
    return cpu_layer.Q8Layers(runner.layers, runner.norm_w, isa.Q8[v][0], ropes, windows)


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
        self.one_thread = self.kernels and cpu_layer_one_thread()  # built without OpenMP: its GEMMs on one thread
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
        used = [f.codes.label for f in [self.head_t] + [w[k] for w in self.layers for k in MATRICES] if f.codes]
        labels = sorted(set(used), key=used.index)  # e.g. ["amx-bf16"], ["avx2-int8"], ["amx-bf16", "avx512-vnni-int8"]
        self.on_codes, self.codes_variant = bool(used), " + ".join(labels)
        self.codes_int8 = any(gguf_q8.is_label(v) for v in labels)
        self.one_call = one_call(self)
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
        self.open_row = torch.zeros(1, max_len, dtype=self.att)  # a decode step's bias: every entry visible (read only)
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
        step = n == 1 and mask is None  # one new row that sees every entry: no mask to build, no positions to gather
        last = int(pos[0]) if step else int(pos.max())
        need = max(start + n, last + 1)  # rows, and rope rows (a drafter's positions run one ahead)
        if need > self.max_len:
            self._alloc(2 * need, keep_rows=start)
        self.row_pos[start:start + n] = pos
        bias = self._biases(self.open_row[:, :start + 1] if step else tree_bias(mask, n, C, P, self.att), pos, start + n)
        if embeds is None:
            x = F.embedding(ids, self.embed).to(self.act)
            x = x * a.embed_scale if a.embed_scale != 1.0 else x
        else:
            x = embeds.to(self.act, copy=True).contiguous()  # the fused kernels update x in place
        self.n_pending += n
        if self.kernels:
            at = slice(last, last + 1) if step else pos
            rope = {k: (cos[at], sin[at]) for k, (cos, sin) in self.rope.items()}
            if self.one_call is not None and not (start == 0 and n >= PREFILL_ROWS and prefill_on_plain()):  # (mm's)
                return self.one_call(x, rope, bias, self.kt, self.v, start, a, self.dtype), x.to(self.dtype)
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
            b = window_bias(bias, pos, self.row_pos, w) if w and S > w else bias
            out[w] = b.repeat(G, 1) if G > 1 else b
        return out

    def logits(self, hidden):
        """[n, d] @ [d, V] -> fp32 [n, V] (with the model's final soft-cap, if any). Every row of a committed prompt
        at once, nothing pending, takes mm's prefill route (the engine asks for the root's row alone, and a NanoSpec
        head's S⁽⁰⁾ for the others apart)."""
        prefill = self.n_pending == 0 and hidden.shape[0] == self.n_committed
        z = mm(hidden.to(self.act), self.head_t, prefill).float()
        return torch.tanh(z / self.softcap) * self.softcap if self.softcap else z

    def top2(self, logits) -> tuple[list, torch.Tensor]:
        """As runner.top2, in one C pass over the logits where the kernels run (~15 us for 49k logits against
        torch's argmax and topk, ~180 us); torch's own where a row holds a NaN."""
        got = cpu_layer.top2(logits) if self.kernels else None
        return (got[0].tolist(), got[1]) if got is not None else top2(logits)

    def commit(self, keep) -> None:
        """Keep pending entries `keep` (indices into the pending region, in order); drop the rest."""
        keep = torch.as_tensor(keep, dtype=torch.long).view(-1)
        C, m = self.n_committed, keep.numel()
        if keep.tolist() != list(range(m)):
            self.kt[..., C:C + m], self.v[:, :, C:C + m] = self.kt[..., C + keep], self.v[:, :, C + keep]
            self.row_pos[C:C + m] = self.row_pos[C + keep]
        self.n_committed += m
        self.n_pending = 0


def cpu_layer_one_thread() -> bool:
    from core.kernels.cpu import cpu_layer
    return cpu_layer.one_thread()


def kernels_reason(a: Arch, dtype, fast_cfg: FastConfig) -> str:
    """'' if the fused C kernels serve a model of this architecture and weight dtype, else why the runner keeps
    its torch path."""
    from core.kernels.cpu import cpu_layer
    if not fast_cfg.kernels:
        return "fused CPU kernels turned off"
    if a.act_id < 0:
        return "the fused CPU kernels do not cover this MLP activation"
    if dtype not in (torch.float32, torch.bfloat16):
        return "the fused CPU kernels cover fp32 and bf16 weights"
    if a.hd % 16:
        return "the fused CPU kernels need a head_dim that is a multiple of 16"
    return "" if cpu_layer.lib() is not None else cpu_layer.off_note()


def exact_reason(runner) -> str:
    """'' when a token's logits are bit-identical whatever the number of tokens sharing its forward (greedy
    speculation then equals greedy decoding bit for bit), else why they may differ by rounding."""
    if runner.fast_cfg.weights != "model":
        return f"{runner.fast_cfg.weights} weights (a draft model's): their products are not checked for exactness"
    forms = [runner.head_t] + [w[k] for w in runner.layers for k in MATRICES]
    if runner.kernels and all(f.codes is not None for f in forms):  # codes products: rows stable by construction
        return ""
    if runner.fast_cfg.layout != "packed":
        return "1-token and batched GEMMs sum in different orders: lossless up to rounding, ties reported"
    if not runner.kernels:
        return "attention without the fused kernels sums per pass size: lossless up to rounding, ties reported"
    shapes = {f.packed.shape for f in forms if f.codes is None}  # codes_mm rows are stable by construction
    if not all(exact_pads(shapes).values()):
        return "oneDNN's bf16 products depend on the row count on this CPU: lossless up to rounding, ties reported"
    return ""


def logits_gap(model, runner, n: int = 5, first: int = 0) -> float:
    """max |fast - transformers| logits on a short causal prefill of tokens spread over the vocabulary, relative to
    the largest logit, over positions `first`.. (int8 activations: from 1, see gap_tolerance)."""
    ids = (torch.arange(n) * 7919 + runner.vocab_size // 3) % runner.vocab_size
    with torch.no_grad():
        ref = model(input_ids=ids.view(1, n), use_cache=False).logits[0].float()
    runner.reset()
    hid, _ = runner.forward(ids, torch.arange(n))
    runner.reset()
    z, ref = runner.logits(hid)[first:], ref[first:]
    return float((z - ref).abs().max() / ref.abs().max().clamp(min=1.0))


def gap_tolerance(dtype, int8: bool = False) -> float:
    """fp32: 1e-3; bf16: 32 eps = 0.25 (transformers' own bf16 forward, with its bf16 residual stream, is
    5-7 % off on SmolLM2 / gemma-3-270m and 17 % off fp32 on Qwen2.5-Coder-0.5B, where ours is 1.6 % off);
    int8 activations (gguf_q8.py): 0.25 as bf16, from the second position on (Qwen2.5-Coder-1.5B: 3-6 %; its first
    position, the attention sink with activations in the hundreds, is 52 % off, and its logits are sampled only
    after a 1-token prompt); a real mismatch is O(1)."""
    return max(1e-3, 32 * torch.finfo(torch.bfloat16 if int8 else dtype).eps)


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
            gap = logits_gap(model, runner, first=int(runner.codes_int8)) if fast_cfg.check and runtime == "auto" else 0.0
            if fast_cfg.weights != "model" and gap <= gap_tolerance(runner.dtype, runner.codes_int8):
                runner = FastRunner(model, tokenizer, fast_cfg)  # shares the checked runner's weight forms
        except (RuntimeError, ValueError, AttributeError, TypeError) as err:
            if runtime == "fast":
                raise SpecError(f"fast runtime failed on this model: {err}") from None
            runner, gap, reason = None, 0.0, f"fast runtime failed on this model: {err}"
        if runner is not None and gap <= gap_tolerance(runner.dtype, runner.codes_int8):
            return runner
        reason = reason or f"fast runtime logits differ from transformers by {gap:.2g} (relative)"
    runner = EagerRunner(model, tokenizer)
    runner.fallback_reason = reason
    return runner
