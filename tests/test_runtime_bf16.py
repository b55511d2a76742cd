"""FastRunner in bf16 (core/runtime/fast.py, weights.py): oneDNN-packed weights, row-stable products, int8 / int4 draft
weights, against the transformers model and the fast runtime's own single-token passes."""
import pytest
import torch

from core.errors import SpecError
from core.runtime.config import FastConfig
from core.runtime.fast import FastRunner, make_runner
from core.runtime.weights import packed_ok
from runtime_cases import layer_ops  # noqa: F401  (autouse: every spec with the C kernels and on the torch path)
from runtime_cases import ATOL, path, ref_logits, tiny_variant, tree_mask

pytestmark = pytest.mark.usefixtures("single_thread")


needs_packed = pytest.mark.skipif(not packed_ok(), reason="oneDNN cannot pack bf16 weights on this CPU")


def chain_and_steps(runner, prompt, nodes):
    """Logits of `nodes` after `prompt`: one batched pass, then one pass per node (same cache rows)."""
    runner.reset()
    runner.forward(torch.tensor(prompt), torch.arange(len(prompt)))
    runner.commit(torch.arange(len(prompt)))
    C, n = len(prompt), len(nodes)
    batched = runner.logits(runner.forward(torch.tensor(nodes), torch.arange(C, C + n))[0])
    runner.commit(torch.zeros(0, dtype=torch.long))
    steps = [runner.logits(runner.forward(torch.tensor([t]), torch.tensor([C + i]))[0]) for i, t in enumerate(nodes)]
    return batched, torch.cat(steps)


@needs_packed
def test_packed_bf16_logits_match_unpacked_bf16():
    model = tiny_variant("qwen2").to(torch.bfloat16)
    prompt = list(range(3, 40))
    packed = FastRunner(model, None, FastConfig(layout="packed"))
    blocked = FastRunner(model, None, FastConfig(layout="blocked"))
    for got, want in zip(chain_and_steps(packed, prompt, [5, 9, 11]), chain_and_steps(blocked, prompt, [5, 9, 11])):
        torch.testing.assert_close(got, want, atol=0.05, rtol=0.02)  # bf16: 2^-8 relative per rounding


@needs_packed
@pytest.mark.parametrize("n", [2, 7, 16, 32])
def test_packed_bf16_rows_do_not_depend_on_the_pass_size(n):
    runner = FastRunner(tiny_variant("llama").to(torch.bfloat16))
    assert runner.fast_cfg.layout == "packed"
    g = torch.Generator().manual_seed(n)
    prompt, nodes = torch.randint(3, 512, (20,), generator=g).tolist(), torch.randint(3, 512, (n,), generator=g).tolist()
    batched, steps = chain_and_steps(runner, prompt, nodes)
    assert torch.equal(batched, steps)


@needs_packed
@pytest.mark.parametrize("out,k", [(576, 1536), (3072, 576), (896, 4864), (1536, 8960)])
def test_packed_bf16_products_give_each_row_the_same_bits_whatever_the_row_count(out, k):
    """Real models' shapes (SmolLM2's and Qwen2.5's down projections): oneDNN may choose its kernel, and so
    its summation order, by the row count; mm pads short products so that it cannot."""
    from core.runtime.weights import forms, mm
    g = torch.Generator().manual_seed(k)
    w = forms(torch.randn(k, out, generator=g).bfloat16(), FastConfig(layout="packed"))
    x = torch.randn(33, k, generator=g)
    alone = torch.cat([mm(x[i:i + 1], w) for i in range(33)])
    for n in (2, 3, 7, 16, 33):
        assert torch.equal(mm(x[:n], w), alone[:n]), n


def test_the_default_model_runner_says_whether_its_rows_are_exact():
    runner = FastRunner(tiny_variant("llama").to(torch.bfloat16)) if packed_ok() else FastRunner(tiny_variant("llama"))
    assert runner.exact_reason == ("" if packed_ok() and runner.kernels else runner.exact_reason)
    assert FastRunner(tiny_variant("llama"), None, FastConfig(layout="hybrid")).exact_reason != ""


@needs_packed
def test_packed_bf16_tree_paths_equal_decoding_them_one_by_one():
    runner = FastRunner(tiny_variant("llama", seed=5).to(torch.bfloat16))
    parents = [-1, 0, 0, 1, 2, 4, 4, 6]  # the path to node 7 sits on rows 0, 2, 4, 6, 7: gaps in the cache
    g = torch.Generator().manual_seed(4)
    prompt, nodes = torch.randint(3, 512, (30,), generator=g).tolist(), torch.randint(3, 512, (8,), generator=g)
    runner.forward(torch.tensor(prompt), torch.arange(30))
    runner.commit(torch.arange(30))
    depth = torch.tensor([len(path(parents, i)) - 1 for i in range(8)])
    tree = runner.logits(runner.forward(nodes, 30 + depth, tree_mask(parents))[0])
    runner.commit(torch.zeros(0, dtype=torch.long))
    on_path = path(parents, 7)
    steps = [runner.logits(runner.forward(nodes[j:j + 1], torch.tensor([30 + k]))[0]) for k, j in enumerate(on_path)]
    assert torch.equal(tree[on_path], torch.cat(steps))


def test_bf16_without_packing_falls_back_to_the_plain_layouts(monkeypatch):
    monkeypatch.setattr("core.runtime.weights.packed_ok", lambda: False)
    model = tiny_variant("llama").to(torch.bfloat16)
    runner = make_runner(model, None, "auto", FastConfig(layout="auto"))
    assert runner.runtime_name == "fast" and runner.fast_cfg.layout == "hybrid"
    prompt = list(range(3, 20))
    hid, _ = runner.forward(torch.tensor(prompt), torch.arange(len(prompt)))
    assert hid.dtype == torch.bfloat16
    torch.testing.assert_close(runner.logits(hid), ref_logits(model, prompt), atol=0.1, rtol=0.05)
    with pytest.raises(ValueError):
        FastRunner(model, None, FastConfig(layout="packed"))
    with pytest.raises(SpecError):
        make_runner(model, None, "fast", FastConfig(layout="packed"))


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_packed)])
@pytest.mark.parametrize("method", ["full", "frspec", "nanospec", "slimspec", "nanoslim"])
def test_spec_greedy_equals_the_fast_runtimes_own_greedy(method, dtype):
    """fp32: token for token up to a reported tie (the batched and 1-token GEMMs round differently);
    bf16 packed: exactly (its rows do not depend on the pass size)."""
    from conftest import peaky_tiny

    from core.config import SpecConfig
    from core.decoding.draft import ModelDrafter
    from core.decoding.engine import generate
    from core.decoding.heads import build_head
    from core.trace.stats import compare_to_ar

    model = peaky_tiny(0).to(dtype)
    prompt = torch.randint(0, 300, (14,), generator=torch.Generator().manual_seed(1)).tolist()
    ar = list(generate(FastRunner(model), None, None, prompt, SpecConfig(method="ar", max_new_tokens=40)))
    cfg = SpecConfig(method=method, max_new_tokens=40, w_max=48, rank=16)
    drafter = ModelDrafter(FastRunner(model))
    head = build_head(method, drafter.head_weight, cfg, fr_ids=torch.arange(0, 300, 3))
    spec = list(generate(FastRunner(model), drafter, head, prompt, cfg))
    cmp = compare_to_ar(spec, ar)
    assert cmp["identical"] or (dtype == torch.float32 and cmp["tie"]), cmp


def peaky_qwen2_pair(vocab: int = 300):
    """A tiny Qwen2 target (tied embeddings, q/k/v biases, 2 layers, head_dim 16) with peaked next-token
    distributions, and its 1-layer draft: the target's embeddings and first layer (a strong, cheap draft, as a
    Qwen2.5 0.5B is for the 1.5B)."""
    import transformers as tf
    hf_cfg = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, max_position_embeddings=1024, tie_word_embeddings=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        target = tf.Qwen2ForCausalLM(tf.Qwen2Config(**hf_cfg, num_hidden_layers=2)).float().eval()
    with torch.no_grad():
        target.model.embed_tokens.weight.mul_(8.0)  # tied: the head's logits are 8x sharper
    draft = tf.Qwen2ForCausalLM(tf.Qwen2Config(**hf_cfg, num_hidden_layers=1)).float().eval()
    draft.load_state_dict(target.state_dict(), strict=False)
    return target, draft


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_packed)])
@pytest.mark.parametrize("method", ["full", "frspec", "nanospec", "slimspec", "nanoslim"])
def test_qwen2_draft_model_greedy_equals_the_targets_own_greedy(method, dtype):
    """A separate Qwen2 draft model on the fast runtime: speculative greedy = the target's own greedy (fp32: up
    to a near-tie; bf16 packed: exactly), and the draft is accepted often enough that multi-token steps run."""
    from core.config import SpecConfig
    from core.decoding.draft import ModelDrafter
    from core.decoding.engine import generate
    from core.decoding.heads import build_head
    from core.trace.stats import compare_to_ar

    target, draft = (m.to(dtype) for m in peaky_qwen2_pair())
    prompt = torch.randint(0, 300, (14,), generator=torch.Generator().manual_seed(1)).tolist()
    ar = list(generate(FastRunner(target), None, None, prompt, SpecConfig(method="ar", max_new_tokens=40)))
    cfg = SpecConfig(method=method, max_new_tokens=40, w_max=48, rank=16)
    drafter = ModelDrafter(FastRunner(draft))
    frequent = torch.tensor([t for r in ar for t in r.emitted])  # an FR-Spec table from the target's own output
    head = build_head(method, drafter.head_weight, cfg, fr_ids=torch.unique(torch.cat([frequent, torch.arange(0, 300, 3)])))
    spec = list(generate(FastRunner(target), drafter, head, prompt, cfg))
    cmp = compare_to_ar(spec, ar)
    assert cmp["identical"] or (dtype == torch.float32 and cmp["tie"]), cmp
    assert max(len(r.accepted) for r in spec if r.kind == "step") >= 2


@pytest.mark.parametrize("target", ["llama", "qwen2"])
def test_eagle_drafter_on_fast_runtime_matches_eager(target):
    """The EAGLE layer on the fast runtime (a 1-layer runner): prefill, extend, a two-level tree, rollback. Over a
    Qwen2 target the layer has attention_bias: q, k, v and o_proj biases, all trained non-zero."""
    from core.decoding.eagle import EagleConfig, EagleDrafter, EagleHead, init_from_target
    from runtime_cases import with_random_biases
    model = tiny_variant(target, 3)
    head = init_from_target(EagleHead(model.config, EagleConfig()), model).attach(model)
    with torch.no_grad():
        head.fc.weight.normal_(0, 0.2)
    head = with_random_biases(head, 3)
    assert (head.layers[0].self_attn.o_proj.bias is not None) == (target == "qwen2")
    W = model.lm_head.weight
    drafters = [EagleDrafter(head, W, "eager"), EagleDrafter(head, W, "fast")]
    assert type(drafters[1].runner).__name__ == "FastRunner"
    g = torch.Generator().manual_seed(0)
    prompt, feats, more = torch.randint(3, 512, (7,), generator=g), torch.randn(7, 64, generator=g), torch.randn(2, 64, generator=g)
    out = []
    for dr in drafters:
        st = dr.prefill(prompt, 5, feats)
        st = dr.extend(torch.tensor([9, 10]), more)
        l1 = dr.expand(st, torch.tensor([11, 12]), torch.tensor([10, 10]), torch.eye(2, dtype=torch.bool))
        l2 = dr.expand(l1, torch.tensor([13, 14]), torch.tensor([11, 11]),
                       torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.bool))
        dr.rollback()
        out.append((st.head_in, l1.head_in, l2.head_in, l2.state, dr.n_committed, dr.n_pending))
    for a, b in zip(*out):
        if isinstance(a, int):
            assert a == b
        else:
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_a_quantized_draft_model_keeps_greedy_exact_and_is_still_accepted(weights):
    """A draft model's layer weights in int8 / int4 change only what it proposes: speculative greedy stays the
    bf16 target's own greedy, bit for bit, and the quantized draft still gets multi-token steps accepted."""
    from core.config import SpecConfig
    from core.decoding.engine import generate
    from core.decoding.heads import build_head
    from core.pipeline import model_drafter
    from core.trace.stats import compare_to_ar

    target, draft = (m.to(torch.bfloat16) for m in peaky_qwen2_pair())
    prompt = torch.randint(0, 300, (14,), generator=torch.Generator().manual_seed(2)).tolist()
    ar = list(generate(FastRunner(target), None, None, prompt, SpecConfig(method="ar", max_new_tokens=40)))
    drafter = model_drafter(draft, None, "tiny-draft", "fast", weights)
    assert drafter.runner.fast_cfg.weights == weights and drafter.runner.layers[0]["wgu"].quant[0] == weights
    cfg = SpecConfig(method="nanospec", max_new_tokens=40, w_max=48)
    spec = list(generate(FastRunner(target), drafter, build_head("nanospec", drafter.head_weight, cfg), prompt, cfg))
    assert compare_to_ar(spec, ar)["identical"]
    assert max(len(r.accepted) for r in spec if r.kind == "step") >= 2


def test_quantized_weights_stay_within_a_few_percent_of_the_models_own_products():
    """int8 per channel / int4 per group of 64: the layer products of a draft model stay close to its bf16 ones."""
    from core.runtime.quant import quantize
    from core.runtime.weights import Forms, mm
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(96, 128, generator=g).bfloat16(), torch.randn(3, 128, generator=g)
    ref = x @ w.float().t()
    for kind, tol in (("int8", 0.02), ("int4", 0.2)):
        err = (mm(x, Forms(quant=quantize(w, kind))) - ref).abs().max() / ref.abs().max()
        assert err < tol, (kind, float(err))


def test_an_o_proj_bias_runs_on_the_fast_runtime_in_bf16():
    """An EAGLE head's layer over a Qwen2 target: a Llama layer with attention_bias, its o_proj bias trained non-zero."""
    model = tiny_variant("llama-bias").to(torch.bfloat16)
    runner = make_runner(model, None, "auto")
    assert runner.runtime_name == "fast", getattr(runner, "fallback_reason", "")
    prompt = list(range(3, 20))
    hid, _ = runner.forward(torch.tensor(prompt), torch.arange(len(prompt)))
    torch.testing.assert_close(runner.logits(hid), ref_logits(model, prompt), atol=0.1, rtol=0.05)
