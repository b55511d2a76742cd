"""FastRunner (core/runtime/fast.py) against the transformers model itself: prefill, tree verify, commit, greedy."""
import pytest
import torch

from core.errors import SpecError
from core.models import DEFAULT_MODEL, converted_dir
from core.runtime.config import FastConfig
from core.runtime.fast import FastRunner, make_runner
from runtime_cases import layer_ops  # noqa: F401  (autouse: every spec with the C kernels and on the torch path)
from runtime_cases import ATOL, assert_same_greedy, greedy, hf_greedy, path, ref_logits, tiny_variant, tree_mask

pytestmark = pytest.mark.usefixtures("single_thread")


# tree over 4 nodes: 0 <- root, 1 <- 0, 2 <- 0, 3 <- 2 (parents; -1 = the last committed token)
PARENTS = [-1, 0, 0, 2]


@pytest.mark.parametrize("kind,layout", [("llama", "hybrid"), ("llama", "plain"), ("llama", "blocked"),
                                         ("llama-bias", "hybrid"), ("llama-bias", "blocked"),
                                         ("qwen2", "hybrid"), ("qwen2-tied", "hybrid"), ("qwen2-tied", "blocked"),
                                         ("qwen3", "hybrid"), ("gemma3", "hybrid"),
                                         ("gemma3", "blocked"), ("mistral", "hybrid"), ("llama", "eager"),
                                         ("gemma3", "eager"), ("mistral", "eager")])
def test_prefill_tree_commit_match_transformers(kind, layout):
    """Both runners; gemma3's and mistral's 12-token prompts outgrow their 4-token sliding windows."""
    from core.runtime.runner import EagerRunner
    model = tiny_variant(kind)
    runner = (EagerRunner(model) if layout == "eager"
              else FastRunner(model, None, FastConfig(max_len=16, layout=layout)))  # small: the tree step regrows
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 512, (12,), generator=g).tolist()
    nodes = torch.randint(3, 512, (4,), generator=g).tolist()

    hid, feats = runner.forward(torch.tensor(prompt), torch.arange(12))
    assert hid.shape == feats.shape == (12, 64)
    torch.testing.assert_close(runner.logits(hid), ref_logits(model, prompt), atol=ATOL, rtol=0)
    runner.commit(torch.arange(12))

    depth = torch.tensor([len(path(PARENTS, i)) - 1 for i in range(4)])
    hid, _ = runner.forward(torch.tensor(nodes), 12 + depth, tree_mask(PARENTS))
    got = runner.logits(hid)
    for i in range(4):
        want = ref_logits(model, prompt + [nodes[j] for j in path(PARENTS, i)])[-1]
        torch.testing.assert_close(got[i], want, atol=ATOL, rtol=0)
    assert (runner.n_committed, runner.n_pending) == (12, 4)

    runner.commit(torch.tensor([0, 2, 3]))  # accept the path 0 -> 2 -> 3
    assert (runner.n_committed, runner.n_pending) == (15, 0)
    accepted = prompt + [nodes[0], nodes[2], nodes[3]]
    more = [7, 8]
    hid, _ = runner.forward(torch.tensor(more), torch.arange(15, 17))
    torch.testing.assert_close(runner.logits(hid), ref_logits(model, accepted + more)[-2:], atol=ATOL, rtol=0)


def test_features_are_last_layer_before_norm():
    model = tiny_variant("llama")
    runner = FastRunner(model)
    ids = [5, 6, 7, 8]
    hid, feats = runner.forward(torch.tensor(ids), torch.arange(4))
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    torch.testing.assert_close(hid, out.last_hidden_state[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(model.model.norm(feats), hid, atol=ATOL, rtol=0)


def test_shared_weights_leave_transformers_unchanged():
    model = tiny_variant("qwen2")
    ids = list(range(3, 20))
    before = ref_logits(model, ids)
    runner = FastRunner(model, None, FastConfig(layout="plain"))
    torch.testing.assert_close(ref_logits(model, ids), before, atol=1e-5, rtol=0)
    layer = model.model.layers[0].self_attn
    assert layer.q_proj.weight.data_ptr() == runner.layers[0]["wqkv"][0].data_ptr()
    hybrid = FastRunner(model, None, FastConfig(layout="hybrid"))  # shared plain matrices + blocked copies
    assert hybrid.layers[0]["wqkv"][0].data_ptr() == layer.q_proj.weight.data_ptr()
    assert hybrid.layers[0]["wgu"][1].dim() == 3 and hybrid.head_t[1].dim() == 3
    torch.testing.assert_close(ref_logits(model, ids), before, atol=1e-5, rtol=0)
    other = tiny_variant("qwen2")
    blocked = FastRunner(other, None, FastConfig(layout="blocked"))  # leaves the model's tensors alone
    assert blocked.layers[0]["wgu"][0] is None and other.model.layers[0].mlp.up_proj.weight.is_contiguous()


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2-tied"])
def test_greedy_equals_generate(kind):
    model = tiny_variant(kind, seed=3)
    runner = FastRunner(model)
    g = torch.Generator().manual_seed(2)
    for n_prompt in (1, 17):
        prompt = torch.randint(3, 512, (n_prompt,), generator=g).tolist()
        assert_same_greedy(model, greedy(runner, prompt, 16), hf_greedy(model, prompt, 16), prompt)


def test_make_runner_choices():
    model = tiny_variant("llama")
    fast = make_runner(model, None, "auto")
    assert fast.runtime_name == "fast" and fast.fallback_reason == ""
    assert make_runner(model, None, "eager").runtime_name == "eager"
    gemma = tiny_variant("gemma2")
    eager = make_runner(gemma, None, "auto")
    assert eager.runtime_name == "eager" and "gemma2" in eager.fallback_reason
    with pytest.raises(SpecError):
        make_runner(gemma, None, "fast")
    with pytest.raises(SpecError):
        make_runner(model, None, "turbo")


@pytest.mark.model
@pytest.mark.skipif(not (converted_dir(DEFAULT_MODEL) / "config.json").is_file(),
                    reason="default model not converted on this machine")
def test_default_model_short(monkeypatch):
    """The fast runtime's own fp32 products against transformers' (a GGUF's int8 products: tests/test_gguf_q8.py)."""
    from core.models import load_model

    model, _ = load_model(DEFAULT_MODEL)
    runner = make_runner(model, None, "auto", FastConfig(codes=False))
    assert runner.runtime_name == "fast", runner.fallback_reason
    prompt = [1, 504, 3458, 282, 4457, 314]
    hid, _ = runner.forward(torch.tensor(prompt), torch.arange(len(prompt)))
    torch.testing.assert_close(runner.logits(hid), ref_logits(model, prompt), atol=1e-3, rtol=0)
    runner.commit(torch.arange(len(prompt)))
    assert_same_greedy(model, greedy(runner, prompt, 4), hf_greedy(model, prompt, 4), prompt)


def test_second_runner_reuses_weights():
    model = tiny_variant("llama")
    a, b = FastRunner(model), FastRunner(model)
    assert a.head_t[1].data_ptr() == b.head_t[1].data_ptr() and a.v.data_ptr() != b.v.data_ptr()
    assert a.layers[1]["wgu"][1].data_ptr() == b.layers[1]["wgu"][1].data_ptr()


def test_the_eager_runner_hands_its_cache_to_a_decoder_that_names_it_past_key_values():
    """transformers 5.x renamed the decoder's `past_key_values` to `cache`; a cache passed under the other name
    lands in **kwargs unused and every step sees only its own tokens."""
    from core.runtime.runner import EagerRunner, cache_kwarg
    model = tiny_variant("llama")
    base, name = model.get_decoder(), cache_kwarg(model.get_decoder())
    forward = base.forward

    def old_forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
                    use_cache=None, **kwargs):
        return forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       inputs_embeds=inputs_embeds, use_cache=use_cache, **{name: past_key_values}, **kwargs)

    prompt = torch.randint(3, 512, (9,), generator=torch.Generator().manual_seed(2)).tolist()
    want = ref_logits(model, prompt)[-1]
    base.forward = old_forward
    runner = EagerRunner(model)
    runner.forward(torch.tensor(prompt[:8]), torch.arange(8))
    runner.commit(torch.arange(8))
    hid, _ = runner.forward(torch.tensor(prompt[8:]), torch.tensor([8]))
    assert runner.cache_name == "past_key_values"
    torch.testing.assert_close(runner.logits(hid)[0], want, atol=ATOL, rtol=0)
