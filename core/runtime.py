"""FastRunner: a compact gpt-fast-style forward for llama-family models, same interface as EagerRunner.

Weights come from the transformers model, re-laid out once: q|k|v and gate|up fused, every matrix stored
transposed and contiguous ([in, out], so `x @ w` hits the fast BLAS path for small n); with
`share_weights` the transformers model's parameters are rebound to views of these buffers, so memory is
not doubled and the eager path computes the same numbers. The KV cache is one static tensor
[layers, 2 * kv_heads, max_len, head_dim] (keys then values): committed rows, then pending rows.
"""
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # static tables; dynamic/longrope depend on length


@dataclass
class FastConfig:
    max_len: int = 1024          # cache rows allocated up front; doubled when a forward needs more
    share_weights: bool = True   # rebind the transformers params to views of the fast layouts (no 2nd copy)
    check: bool = True           # make_runner('auto'): compare logits with transformers once


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


# ---------------------------------------------------------------- support check + weights

def rope_subs(cfg) -> dict:
    """{layer type: rope params} (gemma3: one per layer type) or {None: rope params}."""
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    return {k: v for k, v in rope.items() if isinstance(v, dict)} or {None: rope}


def rope_types(cfg) -> list:
    return [r.get("rope_type", "default") for r in rope_subs(cfg).values()]


def unsupported_reason(model) -> str:
    """'' if FastRunner covers this model, else a one-line reason (shown by the UI)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "?")
    if kind not in ARCHS:
        return f"fast runtime does not cover model_type {kind!r} (covers {', '.join(ARCHS)})"
    if getattr(cfg, "mlp_bias", False) or getattr(cfg, "attn_logit_softcapping", None):
        return "fast runtime does not cover MLP biases or attention soft-capping"
    if getattr(cfg, "use_bidirectional_attention", False):
        return "fast runtime does not cover bidirectional attention"
    bad = [t for t in rope_types(cfg) if t not in ROPE_TYPES]
    if bad:
        return f"fast runtime does not cover rope_type {bad[0]!r}"
    if model.model.layers[0].self_attn.o_proj.bias is not None:
        return "fast runtime does not cover an o_proj bias"
    return ""


def arch_of(model) -> Arch:
    cfg, layer = model.config, model.model.layers[0]
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    gemma = cfg.model_type == "gemma3_text"
    return Arch(cfg.num_hidden_layers, cfg.hidden_size, n_heads, n_kv, hd, cfg.intermediate_size,
                cfg.rms_norm_eps, layer.self_attn.scaling, layer.self_attn.q_proj.bias is not None,
                hasattr(layer.self_attn, "q_norm"), gemma, cfg.hidden_size ** 0.5 if gemma else 1.0,
                1.0 if gemma else 0.0, layer.mlp.act_fn)


def window_of(cfg, i: int) -> int:
    """Sliding-window size of layer i (0 = full attention)."""
    types = getattr(cfg, "layer_types", None)
    if types:
        return (getattr(cfg, "sliding_window", None) or 0) if types[i] == "sliding_attention" else 0
    return getattr(cfg, "sliding_window", None) or 0  # mistral: every layer


def fuse_t(*linears):
    """[in, sum(out)] contiguous: the weights of `linears` side by side, transposed."""
    return torch.cat([lin.weight.detach() for lin in linears], 0).t().contiguous()


def rebind(linears, wt):
    """Point each linear's weight at its slice of the fused transposed buffer (a strided [out, in] view)."""
    at = 0
    for lin in linears:
        out = lin.weight.shape[0]
        lin.weight.data = wt[:, at:at + out].t()
        at += out


def norm_w(norm, a: Arch):
    return norm.weight.detach() + a.norm_offset if a.norm_offset else norm.weight.detach()


def layer_weights(model, i: int, a: Arch, share: bool) -> dict:
    layer, cfg = model.model.layers[i], model.config
    att, mlp = layer.self_attn, layer.mlp
    qkv, gu = (att.q_proj, att.k_proj, att.v_proj), (mlp.gate_proj, mlp.up_proj)
    pre_mlp = layer.pre_feedforward_layernorm if a.sandwich else layer.post_attention_layernorm
    w = {"ln1": norm_w(layer.input_layernorm, a), "ln2": norm_w(pre_mlp, a),
         "wqkv": fuse_t(*qkv), "wo": fuse_t(att.o_proj), "wgu": fuse_t(*gu), "wd": fuse_t(mlp.down_proj),
         "bqkv": torch.cat([lin.bias.detach() for lin in qkv]) if a.qkv_bias else None,
         "window": window_of(cfg, i), "rope": cfg.layer_types[i] if None not in rope_subs(cfg) else None}
    if a.qk_norm:
        w["qn"], w["kn"] = norm_w(att.q_norm, a), norm_w(att.k_norm, a)
    if a.sandwich:
        w["ln_att"], w["ln_mlp"] = norm_w(layer.post_attention_layernorm, a), norm_w(layer.post_feedforward_layernorm, a)
    if share:
        rebind(qkv, w["wqkv"]), rebind((att.o_proj,), w["wo"]), rebind(gu, w["wgu"])
        rebind((mlp.down_proj,), w["wd"])
    return w


def head_weights(model, share: bool):
    """(embedding [V, d], head transposed [d, V] contiguous); tied weights share one buffer."""
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = emb.weight is head.weight or emb.weight.data_ptr() == head.weight.data_ptr()
    head_t = head.weight.detach().t().contiguous()
    if share:
        head.weight.data = head_t.t()
        if tied:
            emb.weight.data = head_t.t()
    return (head_t.t() if tied else emb.weight.detach()), head_t


@torch.no_grad()
def fast_weights(model, a: Arch, share: bool):
    """(embedding, head^T, per-layer dicts). Shared layouts are built once per model and reused by every
    FastRunner on it (target + self-draft), since the model's params then point into them."""
    if share and getattr(model, "_speclens_fast", None) is not None:
        return model._speclens_fast
    out = (*head_weights(model, share), [layer_weights(model, i, a, share) for i in range(a.n_layers)])
    if share:
        model._speclens_fast = out
    return out


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

def rms(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rope(x, cos, sin):
    """x [n, heads, hd]; cos, sin [n, 1, hd]."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)


def attention(q, kv, bias, a: Arch, S: int):
    """q [n, H, hd]; kv [2K, max_len, hd] (rows < S valid); bias [G*n, S] additive -> [n, H*hd].

    GQA without repeat: query heads grouped per kv head, q -> [K, G*n, hd], scores [K, G*n, S]."""
    n, K, G = q.shape[0], a.n_kv, a.n_heads // a.n_kv
    qg = q.view(n, K, G, a.hd).permute(1, 2, 0, 3).reshape(K, G * n, a.hd)
    s = torch.baddbmm(bias, qg, kv[:K, :S].transpose(1, 2), alpha=a.scale)
    o = torch.bmm(s.softmax(-1), kv[K:, :S])
    return o.view(K, G, n, a.hd).permute(2, 0, 1, 3).reshape(n, a.n_heads * a.hd)


def layer_forward(x, w: dict, kv, cos, sin, bias, start: int, a: Arch):
    """One decoder layer on x [n, d]; writes its new k, v into kv rows [start, start + n)."""
    n, H, K = x.shape[0], a.n_heads, a.n_kv
    h = rms(x, w["ln1"], a.eps)
    qkv = h @ w["wqkv"] if w["bqkv"] is None else torch.addmm(w["bqkv"], h, w["wqkv"])
    qkv = qkv.view(n, H + 2 * K, a.hd)
    q, k, v = qkv[:, :H], qkv[:, H:H + K], qkv[:, H + K:]
    if a.qk_norm:
        q, k = rms(q, w["qn"], a.eps), rms(k, w["kn"], a.eps)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    kv[:, start:start + n] = torch.cat([k, v], 1).transpose(0, 1)
    o = attention(q, kv, bias, a, start + n) @ w["wo"]
    x = x + (rms(o, w["ln_att"], a.eps) if a.sandwich else o)
    gu = rms(x, w["ln2"], a.eps) @ w["wgu"]
    m = (a.act(gu[:, :a.ffn]) * gu[:, a.ffn:]) @ w["wd"]
    return x + (rms(m, w["ln_mlp"], a.eps) if a.sandwich else m)


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

    def __init__(self, model, tokenizer=None, cfg: FastConfig | None = None):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(reason)
        self.model, self.tokenizer, self.cfg = model.eval(), tokenizer, cfg or FastConfig()
        self.arch = a = arch_of(model)
        self.embed, self.head_t, self.layers = fast_weights(model, a, self.cfg.share_weights)
        self.norm_w = norm_w(model.model.norm, a)
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.dtype = self.head_t.dtype
        self.head_weight = self.head_t.t()
        self.d, self.vocab_size = a.d, self.head_t.shape[1]
        self.config, self.device = model.config, self.head_t.device
        self._alloc(self.cfg.max_len)
        self.reset()

    def _alloc(self, max_len: int, keep_rows: int = 0):
        """(Re)allocate the KV cache, the row -> position map and the rope tables for max_len rows."""
        a = self.arch
        kv = torch.zeros(a.n_layers, 2 * a.n_kv, max_len, a.hd, dtype=self.dtype)
        row_pos = torch.zeros(max_len, dtype=torch.long)
        if keep_rows:
            kv[:, :, :keep_rows], row_pos[:keep_rows] = self.kv[:, :, :keep_rows], self.row_pos[:keep_rows]
        self.kv, self.row_pos, self.max_len = kv, row_pos, max_len
        self.rope = {w["rope"]: rope_table(self.model, max_len, self.dtype, w["rope"]) for w in self.layers}

    def reset(self) -> None:
        self.n_committed = 0
        self.n_pending = 0

    @torch.no_grad()
    def forward(self, ids, pos, mask=None):
        """ids, pos: [n]; mask: bool [n, n_pending + n] (None = all pending + causal).
        Returns (hidden after the final norm [n, d], features before it [n, d]); new entries become pending."""
        n, C, P, a = ids.shape[0], self.n_committed, self.n_pending, self.arch
        start = C + P
        if start + n > self.max_len:  # tree positions never exceed the row index, so the rope tables fit
            self._alloc(2 * (start + n), keep_rows=start)
        self.row_pos[start:start + n] = pos
        bias = self._biases(tree_bias(mask, n, C, P, self.dtype), pos, start + n)
        rope = {k: (cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)) for k, (cos, sin) in self.rope.items()}
        x = self.embed[ids] * a.embed_scale if a.embed_scale != 1.0 else self.embed[ids]
        for w, kv in zip(self.layers, self.kv):
            x = layer_forward(x, w, kv, *rope[w["rope"]], bias[w["window"]], start, a)
        self.n_pending += n
        return rms(x, self.norm_w, a.eps), x

    def _biases(self, bias, pos, S: int) -> dict:
        """window -> additive bias [G*n, S] (query rows repeated for the G query heads of a kv head)."""
        G = self.arch.n_heads // self.arch.n_kv
        out = {}
        for w in {w["window"] for w in self.layers}:
            out[w] = (window_bias(bias, pos, self.row_pos, w) if w and S > w else bias).repeat(G, 1)
        return out

    def logits(self, hidden):
        """[n, d] @ [d, V] -> fp32 [n, V] (with the model's final soft-cap, if any)."""
        z = (hidden.to(self.dtype) @ self.head_t).float()
        return torch.tanh(z / self.softcap) * self.softcap if self.softcap else z

    def commit(self, keep) -> None:
        """Keep pending entries `keep` (indices into the pending region, in order); drop the rest."""
        keep = torch.as_tensor(keep, dtype=torch.long).view(-1)
        C, m = self.n_committed, keep.numel()
        if keep.tolist() != list(range(m)):
            self.kv[:, :, C:C + m] = self.kv[:, :, C + keep]
            self.row_pos[C:C + m] = self.row_pos[C + keep]
        self.n_committed += m
        self.n_pending = 0


# ---------------------------------------------------------------- choosing a runtime

def logits_gap(model, runner, n: int = 5) -> float:
    """max |fast - transformers| logits on a short causal prefill (fresh cache both sides)."""
    ids = torch.arange(n) % runner.vocab_size + 3
    with torch.no_grad():
        ref = model(input_ids=ids.view(1, n), use_cache=False).logits[0].float()
    runner.reset()
    hid, _ = runner.forward(ids, torch.arange(n))
    runner.reset()
    return float((runner.logits(hid) - ref).abs().max())


def make_runner(model, tokenizer=None, runtime: str = "auto", cfg: FastConfig | None = None):
    """'eager' | 'fast' | 'auto' (fast where it covers the architecture, else eager with `fallback_reason`)."""
    from core.errors import SpecError
    from core.runner import EagerRunner

    if runtime not in ("auto", "eager", "fast"):
        raise SpecError(f"unknown runtime {runtime!r}: use auto, eager or fast")
    if runtime == "eager":
        return EagerRunner(model, tokenizer)
    reason = unsupported_reason(model)
    if not reason and next(model.parameters()).device.type != "cpu":
        reason = "fast runtime is CPU-only; the eager path uses the accelerator"
    if reason and runtime == "fast":
        raise SpecError(reason)
    if not reason:
        runner = FastRunner(model, tokenizer, cfg)
        gap = logits_gap(model, runner) if (cfg or FastConfig()).check and runtime == "auto" else 0.0
        if gap <= 1e-3:
            return runner
        reason = f"fast runtime logits differ from transformers by {gap:.2g}"
    runner = EagerRunner(model, tokenizer)
    runner.fallback_reason = reason
    return runner


def main(argv=None):
    from core.runtime_bench import main as bench_main
    return bench_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
