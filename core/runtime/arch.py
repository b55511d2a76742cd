"""A transformers model as the fast runtime reads it: whether it covers the model (architecture, rope type), the model's
shape (`Arch`) and its rope tables."""
import torch

from core.runtime.config import Arch

ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")

ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # static tables; dynamic/longrope depend on length


def rope_subs(hf_cfg) -> dict:
    """{layer type: rope params} (gemma3: one per layer type) or {None: rope params}."""
    rope = getattr(hf_cfg, "rope_parameters", None) or getattr(hf_cfg, "rope_scaling", None) or {}
    return {k: v for k, v in rope.items() if isinstance(v, dict)} or {None: rope}


def rope_types(hf_cfg) -> list:
    return [r.get("rope_type", "default") for r in rope_subs(hf_cfg).values()]


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
    from core.kernels.cpu.cpu_layer import ACTS
    return ACTS.get(getattr(hf_cfg, "hidden_activation", None) or getattr(hf_cfg, "hidden_act", None), -1)


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
