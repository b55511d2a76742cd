"""Shared cases for the GGUF codes specs: random valid GGUF blocks of every type the kernels multiply, their gguf-py
dequantization, and tiny Qwen2 / llama models written to a GGUF and loaded dequantized, as core.models.load_model
loads a converted GGUF."""
import numpy as np
import torch

from core.kernels.cpu import gguf_codes as g
from core.kernels.cpu.gguf_q8 import BLOCK, unpermute

SCALES_AT = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}


def random_blocks(kind: str, n: int, k: int, seed: int = 0, scale: float = 4e-5) -> np.ndarray:
    """Valid random GGUF blocks [n, k / block * bytes] (uint8): random codes and sub-block scales, small fp16 d
    (Q4_1 / Q5_1: a negative minimum of about 8 d, centring the weights)."""
    rng = np.random.default_rng(seed)
    inputs, size = BLOCK[kind]
    raw = rng.integers(0, 256, (n, k // inputs, size), dtype=np.uint8)
    for i, at in enumerate(SCALES_AT[kind]):
        d = scale * rng.uniform(0.5, 1.5, (n, k // inputs))
        if i == 1 and kind in ("Q4_1", "Q5_1"):
            d = -8 * d
        raw[..., at:at + 2] = d.astype(np.float16).view(np.uint8).reshape(n, k // inputs, 2)
    return raw.reshape(n, -1)


def dequantized(kind: str, raw: np.ndarray, n: int, k: int, dtype=torch.bfloat16) -> torch.Tensor:
    """gguf-py's dequantizer (what a GGUF conversion stores), in `dtype` as the model loads it."""
    from gguf import GGMLQuantizationType, dequantize
    w = dequantize(raw.reshape(-1), GGMLQuantizationType[kind]).reshape(n, k)
    return torch.from_numpy(w.astype(np.float32)).to(dtype)


def fused(kinds=("Q4_K", "Q6_K", "Q4_K"), ns=(64, 32, 48), k: int = 512):
    """A fused matrix of tensors of mixed types (as q | k | v with a Q6_K v): (codes, bf16 weights)."""
    parts = [(kind, random_blocks(kind, n, k, seed=i), n, k) for i, (kind, n) in enumerate(zip(kinds, ns))]
    return g.matrix_codes(parts), torch.cat([dequantized(kind, raw, n, k) for kind, raw, n, k in parts])


MATRICES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
            "mlp.down_proj": "ffn_down"}


def q4_k_m(name: str) -> str:
    """As a Q4_K_M file: v, the down projection of layer 0 and the head in Q6_K, the rest Q4_K."""
    return "Q6_K" if name in ("blk.0.ffn_down.weight", "output.weight") or "attn_v" in name else "Q4_K"


MIXED = {"attn_q": "Q5_0", "attn_k": "Q8_0", "attn_v": "Q6_K", "attn_output": "Q4_1", "ffn_gate": "Q4_0",
         "ffn_up": "Q5_1", "ffn_down": "Q4_K", "output": "Q8_0"}


def mixed(name: str) -> str:
    """Every type q8_mm multiplies, one per matrix (layer 1's down projection Q6_K)."""
    return "Q6_K" if name == "blk.1.ffn_down.weight" else MIXED[name.split(".")[-2]]


def gguf_qwen2(path, vocab: int = 304, layers: int = 2, kinds=q4_k_m, dtype=torch.bfloat16, arch: str = "qwen2"):
    """A tiny Qwen2 (q/k/v biases, head_dim 64) or llama whose matrices are random GGUF blocks of `kinds(name)`:
    written to `path`, loaded into the model dequantized, in `dtype`, with `speclens_gguf` set as
    core.models.load_model sets it (llama: q / k rows stored permuted, as llama.cpp's converter stores them and
    transformers un-permutes them). Also its 1-layer draft."""
    import transformers as tf
    from gguf import GGMLQuantizationType, GGUFWriter
    cfg = dict(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
               head_dim=64, max_position_embeddings=1024, tie_word_embeddings=False)
    model_cls, cfg_cls = (tf.Qwen2ForCausalLM, tf.Qwen2Config) if arch == "qwen2" else (tf.LlamaForCausalLM, tf.LlamaConfig)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        target = model_cls(cfg_cls(**cfg, num_hidden_layers=layers)).eval()
    writer = GGUFWriter(str(path), arch)
    named = {f"blk.{i}.{t}.weight": target.model.layers[i].get_submodule(m) for i in range(layers)
             for m, t in MATRICES.items()} | {"output.weight": target.lm_head}
    for seed, (name, lin) in enumerate(named.items()):
        kind = kinds(name)
        n, k = lin.weight.shape
        raw = random_blocks(kind, n, k, seed, scale=4e-4 if name == "output.weight" else 4e-5)
        writer.add_tensor(name, raw, raw_dtype=GGMLQuantizationType[kind])
        w = dequantized(kind, raw, n, k, torch.float32)
        heads = {"attn_q": 4, "attn_k": 2}.get(name.split(".")[-2]) if arch == "llama" else None
        with torch.no_grad():
            lin.weight.copy_(w[torch.from_numpy(unpermute(n, heads))] if heads else w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    draft = model_cls(cfg_cls(**cfg, num_hidden_layers=1)).eval()
    draft.load_state_dict(target.state_dict(), strict=False)
    target = target.to(dtype)
    target.speclens_gguf = path
    return target, draft.to(dtype)


def on_codes(runner) -> list:
    """Which of the runner's products run on codes: the head's, then each layer's four."""
    from core.runtime.weights import MATRICES
    return [runner.head_t.codes is not None] + [w[k].codes is not None for w in runner.layers for k in MATRICES]


def spec_and_ar(runner, target, draft, method: str = "nanospec") -> tuple:
    """(speculative records, plain records) of 40 new tokens after a 40-token random prompt (a 2-call prefill): plain
    decoding on `runner`, `method` on a fresh FastRunner of `target` drafted by `draft` (tree 4 / 2 / 8)."""
    from core.config import SpecConfig
    from core.decoding.draft import ModelDrafter
    from core.decoding.engine import generate
    from core.decoding.heads import build_head
    from core.runtime.fast import FastRunner
    prompt = torch.randint(0, 304, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    ar = list(generate(runner, None, None, prompt, SpecConfig(method="ar", max_new_tokens=40)))
    cfg = SpecConfig(method=method, max_new_tokens=40, w_max=64, shape="tree", depth=4, top_k=2, tree_size=8)
    drafter = ModelDrafter(FastRunner(draft))
    spec = list(generate(FastRunner(target), drafter, build_head(method, drafter.head_weight, cfg), prompt, cfg))
    return spec, ar
