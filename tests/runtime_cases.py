"""Shared cases of the runtime specs (test_runtime.py, test_runtime_bf16.py): tiny model variants, transformers
references, tree masks, greedy decoding, and the fixture that runs each spec with the fused C kernels and on the torch
path."""
import pytest
import torch

from tools.tiny import tiny_model

ATOL = 1e-4


@pytest.fixture(autouse=True, params=["c-kernels", "torch-ops"])
def layer_ops(request, monkeypatch):
    """Every spec here holds both with the fused C kernels between the GEMMs and on the torch path they replace."""
    from core.kernels.cpu import cpu_layer, isa
    if request.param == "torch-ops":
        monkeypatch.setenv("SPECLENS_CPU_KERNELS", "0")
    isa.reload()  # the library and the variants read from it
    if request.param == "c-kernels" and cpu_layer.lib() is None:
        pytest.skip(f"fused CPU kernels unavailable: {cpu_layer.why_not()}")
    yield request.param
    monkeypatch.delenv("SPECLENS_CPU_KERNELS", raising=False)
    isa.reload()


def tiny_variant(kind: str, seed: int = 0):
    """tiny random llama / llama-bias (attention_bias: q, k, v and o_proj biases, as an EAGLE head's layer over a Qwen2
    target) / qwen2 (qkv bias) / qwen2-tied (qkv bias, tied embeddings: Qwen2.5 0.5B / 1.5B) / qwen3 (q, k norms) /
    gemma3 (sandwich norms, a 4-token sliding window on layer 0) / mistral (a 4-token window on every layer) / gemma2
    (not covered: attention soft-capping) models, fp32, eval."""
    if kind == "llama":
        return tiny_model(seed)
    if kind == "llama-bias":
        return with_random_biases(tiny_model(seed, attention_bias=True), seed)
    import transformers as tf

    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    cls = {"qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM), "qwen2-tied": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
           "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
           "gemma3": (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
           "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM)}[kind]
    if kind == "gemma3":
        common.update(sliding_window=4, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16)
    if kind == "mistral":
        common.update(sliding_window=4)
    if kind == "qwen2-tied":
        common.update(tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls[1](cls[0](**common, head_dim=16))
        if kind == "gemma3":  # norms start at zero (scale 1 + w): randomise so the (1 + w) offset is tested
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.data.normal_(0, 0.5)
    return model.float().eval()


def with_random_biases(model, seed: int):
    """The model with every linear's bias drawn at random (transformers initialises them to zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.copy_(torch.randn(module.bias.shape, generator=g) * 0.5)
    return model


def ref_logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def tree_mask(parents) -> torch.Tensor:
    n = len(parents)
    m = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            m[i] |= m[p]
    return m


def path(parents, i) -> list:
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def greedy(runner, prompt, n_new):
    runner.reset()
    hid, _ = runner.forward(torch.tensor(prompt), torch.arange(len(prompt)))
    runner.commit(torch.arange(len(prompt)))
    out = []
    for _ in range(n_new):
        out.append(int(runner.logits(hid[-1:]).argmax()))
        hid, _ = runner.forward(torch.tensor(out[-1:]), torch.tensor([runner.n_committed]))
        runner.commit(torch.tensor([0]))
    return out


def assert_same_greedy(model, got, want, prompt):
    """Equal token for token, except at a first divergence where the top-2 logits are a near-tie."""
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            top2 = ref_logits(model, prompt + want[:i])[-1].topk(2).values
            assert float(top2[0] - top2[1]) < ATOL, f"step {i}: {a} != {b} without a tie"
            return
    assert len(got) == len(want)


def hf_greedy(model, prompt, n_new):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new,
                             min_new_tokens=n_new, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()
