import pytest
import torch

from core.decoding.eagle import EagleConfig, EagleDrafter, EagleHead, float_mask, init_from_target
from core.decoding.eagle_io import load_head, load_official_state_dict, save_head
from core.errors import SpecError
from tools.tiny import tiny_model


pytestmark = pytest.mark.usefixtures("single_thread")  # tiny matmuls: one thread (conftest)


def tiny(seed=0):
    torch.manual_seed(seed)
    model = tiny_model(seed)
    head = init_from_target(EagleHead(model.config, EagleConfig()), model).attach(model)
    return model, head


def test_save_load_round_trip(tmp_path):
    model, head = tiny()
    with torch.no_grad():
        head.fc.bias.normal_()
    save_head(head, tmp_path)
    back = load_head(tmp_path, model)
    x = torch.randn(1, 5, 64)
    ids, pos = torch.randint(0, 512, (1, 5)), torch.arange(1, 6)[None]
    a, _ = head(x, ids, pos)
    b, _ = back(x, ids, pos)
    assert torch.allclose(a, b, atol=5e-2, rtol=1e-2)  # fp16 storage
    assert "embed_tokens.weight" not in back.state_dict()


@pytest.mark.parametrize("other", [dict(d=96), dict(vocab=640), dict(layers=3)])
def test_a_head_for_another_target_is_refused_naming_both_shapes(tmp_path, other):
    model, head = tiny()
    save_head(head, tmp_path)
    with pytest.raises(SpecError) as e:
        load_head(tmp_path, tiny_model(**other))
    msg = str(e.value)
    assert "hidden_size 64, vocab_size 512, num_hidden_layers 2" in msg
    assert "target hidden_size {d}, vocab_size {vocab}, num_hidden_layers {layers}".format(
        **(dict(d=64, vocab=512, layers=2) | other)) in msg


def test_head_weights_unlike_their_config_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file
    model, head = tiny()
    save_head(head, tmp_path)
    sd = load_file(tmp_path / "eagle.safetensors")
    sd["fc.weight"] = sd["fc.weight"][:, :64].contiguous()
    save_file(sd, tmp_path / "eagle.safetensors")
    with pytest.raises(SpecError, match=r"fc.weight \(64, 64\) \(config says \(64, 128\)\)"):
        load_head(tmp_path, model)


def test_a_missing_head_is_a_clear_error(tmp_path):
    model, _ = tiny()
    with pytest.raises(SpecError, match="no EAGLE head in .*config.json, eagle.safetensors missing"):
        load_head(tmp_path, model)


def test_a_qwen2_targets_head_layer_starts_as_its_last_layer():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, rope_theta=1e6)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_()  # Qwen2's q/k/v biases: the head's layer must carry them
    head = init_from_target(EagleHead(model.config, EagleConfig()), model).attach(model)
    assert head.lcfg.model_type == "llama" and head.lcfg.rope_parameters["rope_theta"] == 1e6
    x, pos = torch.randn(1, 5, 64), torch.arange(5)[None]
    mask = float_mask(torch.ones(5, 5, dtype=torch.bool).tril())[None, None]
    with torch.no_grad():
        want = model.model.layers[-1](x, attention_mask=mask, position_embeddings=Qwen2RotaryEmbedding(cfg)(x, pos))
        got = head.layers[0](x, attention_mask=mask, position_embeddings=head.rotary(x, pos))
    want, got = (w[0] if isinstance(w, tuple) else w for w in (want, got))
    assert torch.allclose(want, got, atol=1e-5)


def test_official_key_mapping():
    model, head = tiny()
    ref = EagleHead(model.config, EagleConfig(input_norm=False))
    sd = {k: torch.randn_like(v) for k, v in ref.state_dict().items() if not k.startswith("rotary")}
    sd["embed_tokens.weight"] = torch.randn(512, 64)  # official EAGLE-1 ships the embedding: the target's is used
    assert "layers.0.input_layernorm.weight" not in sd
    ignored = load_official_state_dict(head, sd)
    assert ignored == ["embed_tokens.weight"]
    assert not head.ecfg.input_norm
    assert torch.equal(head.layers[0].self_attn.q_proj.weight, sd["layers.0.self_attn.q_proj.weight"])
    assert torch.equal(head.fc.bias, sd["fc.bias"])


def test_drafter_shapes_and_tree_mask():
    model, head = tiny(1)
    with torch.no_grad():
        head.fc.weight.normal_(0, 0.2)
    W = model.lm_head.weight
    prompt = torch.randint(3, 512, (7,))
    feats = torch.randn(7, 64)
    dr = EagleDrafter(head, W)
    st = dr.prefill(prompt, 5, feats)
    assert st.head_in.shape == (1, 64) and st.state.shape == (1, 64) and dr.n_committed == 7
    st = dr.extend(torch.tensor([9, 10]), torch.randn(2, 64))
    assert st.head_in.shape == (1, 64) and dr.n_committed == 9
    root_pos = 9
    # tree: level 1 = nodes a, b (children of the root); level 2 = c (child of a), d (child of b)
    l1 = dr.expand(type(st)(st.head_in.expand(2, -1), st.state.expand(2, -1)), torch.tensor([11, 12]),
                   torch.tensor([root_pos + 1] * 2), torch.eye(2, dtype=torch.bool))
    m2 = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.bool)
    l2 = dr.expand(l1, torch.tensor([13, 14]), torch.tensor([root_pos + 2] * 2), m2)
    assert l1.head_in.shape == (2, 64) and l2.head_in.shape == (2, 64) and dr.n_pending == 4
    # each root-to-node path run separately as a chain
    for j, (t1, t2) in enumerate([(11, 13), (12, 14)]):
        dr.rollback()
        c1 = dr.expand(st, torch.tensor([t1]), torch.tensor([root_pos + 1]), torch.ones(1, 1, dtype=torch.bool))
        c2 = dr.expand(c1, torch.tensor([t2]), torch.tensor([root_pos + 2]), torch.ones(1, 2, dtype=torch.bool))
        assert torch.allclose(c1.head_in[0], l1.head_in[j], atol=1e-5)
        assert torch.allclose(c2.head_in[0], l2.head_in[j], atol=1e-5)
    dr.rollback()
    assert dr.n_pending == 0 and dr.n_committed == 9


def test_eagle3_state_dict_loads_and_runs():
    from core.decoding.eagle_io import load_eagle3_state_dict
    model, _ = tiny()
    c, d, Vd = model.config, 64, 100
    hd = d // c.num_attention_heads
    sd = {"fc.weight": torch.randn(d, 3 * d) * 0.05, "norm.weight": torch.ones(d), "lm_head.weight": torch.randn(Vd, d),
          "d2t": torch.arange(Vd) * 3, "t2d": torch.zeros(512, dtype=torch.bool),
          "midlayer.input_layernorm.weight": torch.ones(d), "midlayer.hidden_norm.weight": torch.ones(d),
          "midlayer.post_attention_layernorm.weight": torch.ones(d),
          "midlayer.self_attn.q_proj.weight": torch.randn(c.num_attention_heads * hd, 2 * d) * 0.05,
          "midlayer.self_attn.k_proj.weight": torch.randn(c.num_key_value_heads * hd, 2 * d) * 0.05,
          "midlayer.self_attn.v_proj.weight": torch.randn(c.num_key_value_heads * hd, 2 * d) * 0.05,
          "midlayer.self_attn.o_proj.weight": torch.randn(d, c.num_attention_heads * hd) * 0.05,
          "midlayer.mlp.gate_proj.weight": torch.randn(c.intermediate_size, d) * 0.05,
          "midlayer.mlp.up_proj.weight": torch.randn(c.intermediate_size, d) * 0.05,
          "midlayer.mlp.down_proj.weight": torch.randn(d, c.intermediate_size) * 0.05}
    head = load_eagle3_state_dict(c, sd).attach(model)
    assert torch.equal(head.midlayer.self_attn.q_proj.weight, sd["midlayer.self_attn.q_proj.weight"])
    out, (k, v) = head(torch.randn(1, 5, 3 * d), torch.randint(0, 512, (1, 5)), torch.arange(1, 6)[None])
    out2, _ = head(out[:, -1:], torch.randint(0, 512, (1, 1)), torch.tensor([[6]]), None, (k, v))  # depth 2: own feature
    logits, ids = head.draft_logits(head.head_in(out2[0]))
    assert logits.shape == (1, Vd) and ids[5] == 5 + 15


def test_an_int8_drafters_fc_multiplies_by_q8_0_blocks_within_a_percent_of_its_own():
    from core.decoding.eagle import fc_fn
    from core.kernels.cpu import gguf_q8
    if not gguf_q8.available():
        pytest.skip("no q8_mm here")
    _, head = tiny()
    with torch.no_grad():
        head.fc.weight.normal_(0, 0.2)
        head.fc.bias.normal_()
    z = torch.randn(5, 128, generator=torch.Generator().manual_seed(0))
    want, got = head.fc(z), fc_fn(head.fc, "int8")(z)
    assert got.shape == want.shape and not torch.equal(got, want)
    assert (got - want).abs().max() <= 0.01 * want.abs().max()
