import random

import pytest
import torch

from core.eagle import EagleConfig, EagleDrafter, EagleHead, init_from_target, load_head, load_official_state_dict, save_head
from core.train_eagle import TrainConfig, draft_losses, response_start, sample_batch, spec_generate, target_weights, token_subset
from core.runner import EagerRunner
from core.tiny import tiny_model


pytestmark = pytest.mark.usefixtures("single_thread")  # tiny matmuls: one thread (conftest)


def tiny(seed=0):
    torch.manual_seed(seed)
    model = tiny_model(seed)
    head = init_from_target(EagleHead(model.config, EagleConfig()), model).attach(model)
    return model, head


def target_features(model, ids):
    grab = []
    h = model.model.norm.register_forward_pre_hook(lambda m, a: grab.append(a[0]))
    with torch.no_grad():
        model.model(input_ids=ids)
    h.remove()
    return grab[0]


def test_trainer_loss_falls():
    model, head = tiny()
    g = torch.Generator().manual_seed(0)
    X = torch.randint(3, 512, (4, 32), generator=g)
    Fe = target_features(model, X)
    valid = torch.ones_like(X, dtype=torch.bool)
    W = model.lm_head.weight.detach()
    sub = token_subset([X.view(-1)], W.shape[0], 0)
    cfg = TrainConfig(depth=2)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses, first = [], None
    for _ in range(30):
        loss, st = draft_losses(head, W[sub], X, Fe, valid, float(Fe.pow(2).mean().sqrt()), cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        first = first or st
    assert set(st) == {"f1", "t1", "a1", "f2", "t2", "a2"}
    # the token CE has a floor (the entropy of a random target, ~log V): check the total and the feature loss
    assert losses[-1] < losses[0] - 0.3
    assert st["f1"] < 0.7 * first["f1"] and st["a1"] >= first["a1"]


def test_prompt_targets_weighted_by_response_start():
    marker = [1, 2, 3]
    x = torch.tensor([5, 1, 2, 3, 9, 1, 2, 3, 7, 8])
    assert response_start(x, marker) == 8 and response_start(x[:3], marker) == 0  # the last marker; none -> 0
    # f_t predicts x_{t+1}: targets t >= start - 1 predict response tokens
    assert target_weights(10, 8, 0.5).tolist() == [0.5] * 7 + [1.0] * 3
    cfg = TrainConfig(batch=3, seq_len=16, prompt_w=0.0)
    _, _, w = sample_batch([x], [torch.zeros(10, 4)], cfg, random.Random(0), [8])
    assert w.tolist() == [[0.0] * 7 + [1.0] * 3] * 3


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


def test_official_key_mapping():
    model, head = tiny()
    ref = EagleHead(model.config, EagleConfig(input_norm=False))
    sd = {k: torch.randn_like(v) for k, v in ref.state_dict().items() if not k.startswith("rotary")}
    sd["embed_tokens.weight"] = torch.randn(512, 64)  # official EAGLE-1 ships the embedding: the target's is used
    assert "layers.0.input_layernorm.weight" not in sd
    ignored = load_official_state_dict(head, sd)
    assert ignored == ["embed_tokens.weight"]
    assert not head.cfg.input_norm
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


def test_spec_generate_equals_greedy():
    model, head = tiny(2)
    runner = EagerRunner(model)
    dr = EagleDrafter(head, runner.head_weight)
    prompt = [random.Random(0).randrange(3, 512) for _ in range(6)]
    out, acc = spec_generate(runner, dr, prompt, 12, depth=3, top_k=2, size=6)
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=len(out), do_sample=False, eos_token_id=None,
                         pad_token_id=0)[0, len(prompt):].tolist()
    assert out == ref
    assert len(acc) >= 1


def slim_setting():
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, 32, generator=g), torch.randn(1200, 32, generator=g)


def test_slim_factors_kl_falls():
    from core.train_slim import train_factors
    W, h = slim_setting()
    up, down, before, after = train_factors(W, h, 4, steps=60, batch=128, lr=1e-2, seed=0, log=lambda s: None)
    assert up.shape == (256, 4) and down.shape == (4, 32)
    assert after[0] < 0.9 * before[0]


def test_slim_top1_term_runs_and_kl_falls():
    from core.train_slim import train_factors
    W, h = slim_setting()
    _, _, before, after = train_factors(W, h, 4, steps=40, batch=128, lr=1e-2, seed=0, log=lambda s: None, ce_w=0.5)
    assert after[0] < before[0] and after[1] >= before[1]


def test_slim_lr_schedule():
    from core.train_slim import lr_at
    assert lr_at(0, 100, 1.0, 10) == 0.1 and lr_at(9, 100, 1.0, 10) == 1.0
    assert abs(lr_at(100, 100, 1.0, 10) - 0.1) < 1e-9
    assert all(lr_at(s, 100, 1.0, 10) >= lr_at(s + 1, 100, 1.0, 10) for s in range(10, 100))


def test_slim_resume_equals_uninterrupted(tmp_path):
    from core.train_slim import train_factors
    W, h = slim_setting()
    kw = dict(steps=30, batch=64, lr=1e-2, seed=0, ckpt_every=10, log_every=5, eval_every=10)
    up, down, _, after = train_factors(W, h, 4, log=lambda s: None, ckpt=str(tmp_path / "a.pt"), **kw)

    def crash_at_25(msg):
        if msg.startswith("slim step 25/"):
            raise KeyboardInterrupt  # killed between checkpoints: the rerun redoes steps 21-25
    ckpt = str(tmp_path / "b.pt")
    with pytest.raises(KeyboardInterrupt):
        train_factors(W, h, 4, log=crash_at_25, ckpt=ckpt, **kw)
    assert torch.load(ckpt, weights_only=False)["state"]["step"] == 20
    logs = []
    up2, down2, _, after2 = train_factors(W, h, 4, log=logs.append, ckpt=ckpt, **kw)
    assert logs[0].startswith("slim resumed at step 20/30")
    assert torch.equal(up, up2) and torch.equal(down, down2) and after == after2


def test_slim_resume_refuses_other_settings(tmp_path):
    from core.errors import SpecError
    from core.train_slim import train_factors
    W, h = slim_setting()
    ckpt = str(tmp_path / "c.pt")
    train_factors(W, h, 4, 5, 64, 1e-2, 0, log=lambda s: None, ckpt=ckpt, settings={"rank": 4})
    with pytest.raises(SpecError):
        train_factors(W, h, 4, 10, 64, 1e-2, 0, log=lambda s: None, ckpt=ckpt, settings={"rank": 5})


def test_eagle3_state_dict_loads_and_runs():
    from core.eagle import load_eagle3_state_dict
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
