"""EAGLE-style drafter: one decoder layer of the target's architecture over [feature; next-token embedding].

EagleHead (EAGLE-1/2 layout): fc Linear(2d -> d, bias) over [f_j ; e(x_{j+1})] -> one LlamaDecoderLayer
(rotary of the target) -> the target's final RMSNorm (frozen, `final_norm`) -> h, the input of a draft LM head
(the target's W or any head of core/decoding/heads.py). The layer output itself (`state`) is the predicted target
feature f^_{j+1}, fed back as the feature of the children when drafting deeper.

Features are the target's last decoder layer output BEFORE the final norm (Runner.forward's 2nd output).
Why `final_norm=True`: we regress the pre-norm feature and let the target's own norm map it to the LM-head
input, exactly as the target does. EAGLE-1 instead uses post-norm features and no norm on the output; see
assets/heads/*/training_card.md for the measured comparison.

Position convention: the entry pairing (f_j, x_{j+1}) sits at position j+1 (the position of x_{j+1}); a tree
node with token id t at target position p pairs (its parent's state, t) at position p. Rotary is relative, so
this matches EAGLE's own (shifted-by-one) convention.

Eagle3Head loads EAGLE-3 checkpoints (fc over 3 fused layers [3d -> d], `midlayer.*`, its own pruned
`lm_head` [V', d] with `d2t`). NanoSpec needs a full-vocabulary head instead: its active set I_t ranges over
the whole vocabulary (tokens enter from the prompt/verify stream at any id), so the draft must be able to
score any token, which a head trained on a fixed pruned vocabulary V' cannot.

On disk (own, official and EAGLE-3 layouts): core/decoding/eagle_io.py.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from core.decoding.draft import DraftState


@dataclass
class EagleConfig:
    target: str = ""
    input_norm: bool = True      # official EAGLE-1 layer 0 has none (identity)
    final_norm: bool = True      # apply the target's (frozen) final norm to the layer output
    feature: str = "pre_norm"    # which target feature the head consumes: pre_norm | post_norm
    depth_trained: int = 1


def repeat_kv(x, n):
    return x if n == 1 else x.repeat_interleave(n, dim=1)


def float_mask(visible):
    """bool [..., T, S] -> additive float mask (0 visible, -inf hidden)."""
    return torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))


def self_attention(attn, x, rotary, hd, mask=None, past=None):
    """Self-attention of a decoder layer over past + new entries: x [B,T,*] (already normed),
    rotary = (cos, sin); mask additive [B|1,1,T,S+T] (None: causal among new, all past visible).
    Returns (o_proj output [B,T,d], (k, v) of the new entries)."""
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, -1, hd).transpose(1, 2)
    k = attn.k_proj(x).view(B, T, -1, hd).transpose(1, 2)
    v = attn.v_proj(x).view(B, T, -1, hd).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, *rotary)  # x [B, H, T, hd], cos/sin [B, T, hd]
    kk, vv = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
    if mask is None:
        S = kk.shape[2] - T
        mask = float_mask(torch.ones(T, S + T, dtype=torch.bool).tril(S)).to(x.device, q.dtype)[None, None]
    rep = q.shape[1] // k.shape[1]
    a = F.scaled_dot_product_attention(q, repeat_kv(kk, rep), repeat_kv(vv, rep), attn_mask=mask)  # [B,H,T,hd]
    return attn.o_proj(a.transpose(1, 2).reshape(B, T, -1)), (k, v)


def layer_config(cfg):
    """The LlamaConfig of the head's layer for a target's config: a Llama target's own; for Qwen2 the same shapes with
    q/k/v biases (attention_bias also gives o_proj a bias, zero from init_from_target)."""
    if cfg.model_type == "llama":
        return cfg
    from transformers import LlamaConfig
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_parameters", "max_position_embeddings",
            "hidden_act", "tie_word_embeddings", "bos_token_id", "eos_token_id")
    return LlamaConfig(**{k: getattr(cfg, k) for k in keys if getattr(cfg, k, None) is not None},
                       attention_bias=cfg.model_type == "qwen2")


class EagleHead(nn.Module):
    def __init__(self, llama_config, ecfg: EagleConfig = None):
        super().__init__()
        self.ecfg = ecfg or EagleConfig()
        self.lcfg = llama_config = layer_config(llama_config)
        d = llama_config.hidden_size
        self.d = d
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.layers = nn.ModuleList([LlamaDecoderLayer(llama_config, 0)])
        if not self.ecfg.input_norm:
            self.layers[0].input_layernorm = nn.Identity()
        self.rotary = LlamaRotaryEmbedding(llama_config)
        self._target = ()   # (embed_tokens, final norm): shared with the target, frozen, not in state_dict

    def attach(self, target_model):
        """Share the target's embedding and final norm (frozen)."""
        base = target_model.get_decoder() if hasattr(target_model, "get_decoder") else target_model.model
        self._target = (base.embed_tokens, base.norm)
        return self

    @property
    def embed(self):
        return self._target[0]

    @property
    def norm(self):
        return self._target[1]

    def head_in(self, out):
        """layer output [.., d] -> LM-head input h [.., d]."""
        return self.norm(out) if self.ecfg.final_norm else out

    def target_in(self, feats):
        """Runner features (pre-norm) -> the features this head consumes and regresses."""
        return feats if self.ecfg.feature == "pre_norm" else self.norm(feats)

    def forward(self, feat, ids, pos, mask=None, past=None):
        """feat [B,T,d], ids [B,T], pos [B,T]; past: (k, v) [B,Hkv,S,hd] of earlier entries;
        mask: additive float [B|1, 1, T, S+T] (None: all past visible, causal among new).
        Returns (layer output [B,T,d], (k, v) of the new entries)."""
        attn = self.layers[0].self_attn
        x = self.fc(torch.cat([feat, self.embed(ids).to(feat.dtype)], -1))
        a, kv = self_attention(attn, self.layers[0].input_layernorm(x), self.rotary(x, pos), attn.head_dim, mask, past)
        x = x + a
        layer = self.layers[0]
        x = x + layer.mlp(layer.post_attention_layernorm(x))
        return x, kv


def init_from_target(head, target_model):
    """Layer <- the target's last decoder layer; fc <- [I | 0] so the first pass starts from the feature."""
    base = target_model.get_decoder() if hasattr(target_model, "get_decoder") else target_model.model
    sd = base.layers[-1].state_dict()
    if not head.ecfg.input_norm:
        sd = {k: v for k, v in sd.items() if not k.startswith("input_layernorm")}
    missing, unexpected = head.layers[0].load_state_dict(sd, strict=False)
    if unexpected or set(missing) - {"self_attn.o_proj.bias"}:
        raise ValueError(f"the target's last layer does not fit the head's: missing {missing}, unexpected {unexpected}")
    d = head.d
    with torch.no_grad():
        if head.layers[0].self_attn.o_proj.bias is not None:
            head.layers[0].self_attn.o_proj.bias.zero_()
        head.fc.weight.zero_()
        head.fc.weight[:, :d].copy_(torch.eye(d))
        head.fc.weight[:, d:].normal_(0, 0.02)
        head.fc.bias.zero_()
    return head


class Eagle3Head(nn.Module):
    """EAGLE-3 draft: fc over 3 fused target layers [3d -> d]; `midlayer` attention over [norm(e); norm(g)]
    (2d -> q/k/v); own final norm + pruned lm_head [V', d]; d2t maps draft ids to target ids (t = d + d2t[d])."""

    def __init__(self, llama_config, draft_vocab):
        super().__init__()
        c, d = llama_config, llama_config.hidden_size
        hd = getattr(c, "head_dim", None) or d // c.num_attention_heads
        self.d, self.hd = d, hd
        self.fc = nn.Linear(3 * d, d, bias=False)
        self.midlayer = nn.Module()
        m = self.midlayer
        m.input_layernorm = LlamaRMSNorm(d, c.rms_norm_eps)
        m.hidden_norm = LlamaRMSNorm(d, c.rms_norm_eps)
        m.post_attention_layernorm = LlamaRMSNorm(d, c.rms_norm_eps)
        m.self_attn = nn.Module()
        m.self_attn.q_proj = nn.Linear(2 * d, c.num_attention_heads * hd, bias=False)
        m.self_attn.k_proj = nn.Linear(2 * d, c.num_key_value_heads * hd, bias=False)
        m.self_attn.v_proj = nn.Linear(2 * d, c.num_key_value_heads * hd, bias=False)
        m.self_attn.o_proj = nn.Linear(c.num_attention_heads * hd, d, bias=False)
        from transformers.models.llama.modeling_llama import LlamaMLP
        m.mlp = LlamaMLP(c)
        self.norm = LlamaRMSNorm(d, c.rms_norm_eps)
        self.lm_head = nn.Linear(d, draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(c.vocab_size, dtype=torch.bool))
        self.rotary = LlamaRotaryEmbedding(c)
        self._target = ()

    def attach(self, target_model):
        base = target_model.get_decoder() if hasattr(target_model, "get_decoder") else target_model.model
        self._target = (base.embed_tokens,)
        return self

    def forward(self, feat, ids, pos, mask=None, past=None):
        """feat: [B,T,3d] fused low/mid/high target features on the first step, or [B,T,d] (own output) deeper."""
        m = self.midlayer
        g = self.fc(feat) if feat.shape[-1] == 3 * self.d else feat
        e = self._target[0](ids).to(g.dtype)
        x = torch.cat([m.input_layernorm(e), m.hidden_norm(g)], -1)
        a, kv = self_attention(m.self_attn, x, self.rotary(g, pos), self.hd, mask, past)
        h = g + a
        h = h + m.mlp(m.post_attention_layernorm(h))
        return h, kv

    def head_in(self, out):
        return self.norm(out)

    def draft_logits(self, h):
        """[n, d] -> ([n, V'] logits, their target ids [V'])."""
        return self.lm_head(h).float(), torch.arange(self.d2t.shape[0]) + self.d2t


def layer_model(head, W):
    """A 1-layer LlamaForCausalLM around the head's decoder layer (shared, not copied), with a copy of the
    target's final norm and 64 rows of the target's LM head W (only make_runner's logits check reads them):
    any runner, eager or fast, can then run the EAGLE layer with its KV cache, tree masks and commit."""
    import copy

    from transformers import LlamaForCausalLM
    hf_cfg = copy.deepcopy(head.lcfg)
    hf_cfg.num_hidden_layers, hf_cfg.tie_word_embeddings = 1, False
    hf_cfg.layer_types = ["full_attention"]
    with torch.device("meta"):
        model = LlamaForCausalLM(hf_cfg)
    model.model.embed_tokens, model.model.norm = head.embed, copy.deepcopy(head.norm)
    model.model.layers = nn.ModuleList([head.layers[0]])
    head.layers[0].self_attn.config = model.config  # the head's own config names no attention implementation
    model.model.rotary_emb = head.rotary
    model.lm_head = nn.Linear(head.d, 64, bias=False, dtype=W.dtype)
    model.lm_head.weight.data = W.detach()[:: max(W.shape[0] // 64, 1)][:64].clone()
    return model.eval()


def fc_fn(fc: nn.Linear, weights: str = "model"):
    """The head's fc as a function. weights "int8" (the layer's draft weights) on the CPU where q8_mm runs: Q8_0
    blocks, as the layer's own int8 weights; else bf16 on the CPU: in fp32 from a transposed copy (a few-row bf16
    product has no fast path there: 0.2 ms vs 0.05 ms for SmolLM2's [1152 -> 576])."""
    from core.runtime.quant import q8_fits, quantize
    from core.runtime.weights import quant_mm
    w = fc.weight
    if w.device.type != "cpu" or (w.dtype != torch.bfloat16 and weights != "int8"):
        return fc
    b = None if fc.bias is None else fc.bias.detach().float()
    if weights == "int8" and q8_fits(w):
        q = quantize(w, "int8")  # the 0.5B head's [1792 -> 896]: 0.3 ms in fp32, ~0.03 on its blocks
        return lambda z: quant_mm(z, q) + b if b is not None else quant_mm(z, q)
    wt = w.detach().float().t().contiguous()
    return lambda z: torch.addmm(b, z.float(), wt) if b is not None else z.float() @ wt


class EagleDrafter:
    """The Drafter protocol (core/decoding/protocols.py) over an EagleHead: the head's fc makes each entry's input, a 1-layer
    runner (eager or fast, see `layer_model`) runs its decoder layer over its own KV cache (committed +
    pending entries, tree masks) and applies the target's final norm."""

    name = "eagle"
    keeps_drafts = False  # a draft's entry rests on the head's own feature, not the target's: taken in again

    def __init__(self, head, head_weight, runtime="eager", weights="model"):
        """weights: the layer's on the fast runtime, "model" (the head's own) | "int8" | "int4" (FastConfig.weights)."""
        from core.runtime.config import FastConfig
        from core.runtime.fast import make_runner
        self.head = head.eval()
        self.head_weight = head_weight     # the target's LM head W [V, d]: the default draft LM head
        self.d = head.d
        self.dtype = head.fc.weight.dtype
        self.device = head.fc.weight.device
        self.runner = make_runner(layer_model(head, head_weight), None, runtime, FastConfig(weights=weights))
        self.fc = fc_fn(head.fc, weights)
        self.reset()

    def reset(self):
        self.runner.reset()
        self.next_pos = 1               # position of the next committed entry
        self.last = None

    @property
    def n_committed(self):
        return self.runner.n_committed

    @property
    def n_pending(self):
        return self.runner.n_pending

    def _step(self, feat, ids, pos, mask):
        """fc([feature; e(ids)]) -> the layer (pending entries) -> DraftState(LM-head input, layer output)."""
        x = self.fc(torch.cat([feat.to(self.dtype), self.head.embed(ids).to(self.dtype)], -1))  # [k, 2d] -> [k, d]
        hid, out = self.runner.forward(ids, pos, mask, embeds=x)
        return DraftState(hid if self.head.ecfg.final_norm else out, out)

    @torch.no_grad()
    def prefill(self, prompt_ids, first, feats):
        """prompt_ids [n], first: the target's token after the prompt, feats [n, d]. Entries (f_j, x_{j+1})."""
        self.reset()
        nxt = torch.cat([prompt_ids.view(-1)[1:].cpu(), torch.tensor([int(first)])])
        return self.extend(nxt, feats)

    @torch.no_grad()
    def extend(self, next_ids, feats):
        """Commit entries (feats[i], next_ids[i]); drops pending. Returns the DraftState of the last entry
        (one row): it drafts the children of the newest token."""
        self.rollback()
        m = next_ids.numel()
        feats = self.head.target_in(feats.to(self.device, self.dtype))
        st = self._step(feats, next_ids.view(-1).to(self.device), torch.arange(self.next_pos, self.next_pos + m), None)
        self.runner.commit(torch.arange(m))
        self.next_pos += m
        self.last = DraftState(st.head_in[-1:], st.state[-1:])
        return self.last

    @torch.no_grad()
    def expand(self, parent, ids, pos, mask):
        """parent: DraftState with one row per new node (its parent's row; a single row broadcasts);
        ids, pos [k]; mask bool [k, n_pending + k] over pending + new entries. New entries become pending."""
        k = ids.numel()
        feat = parent.state if parent.state.shape[0] == k else parent.state.expand(k, -1)
        return self._step(feat, ids.view(-1).to(self.device), pos.view(-1), mask.to(torch.bool))

    def rollback(self, keep=()) -> int:
        self.runner.commit(torch.zeros(0, dtype=torch.long))
        return 0
