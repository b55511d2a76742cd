"""The fused-features experiment (core/train/fused.py) on a tiny random model: its features are the ones named, and
both arms start as the same head."""
import pytest
import torch

from core.train import eagle as te
from core.train import fused as tf
from tests.test_train import target_features, tiny

pytestmark = pytest.mark.usefixtures("single_thread")


def test_layer_features_are_the_pre_norm_last_output_then_the_named_layers():
    model, _ = tiny()
    seq = list(range(5, 25))
    got = tf.layer_features(model, seq, [0]).float()
    d = model.config.hidden_size
    with torch.no_grad():
        hs = model.model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
    assert got.shape == (len(seq), 2 * d)
    assert torch.allclose(got[:, :d], target_features(model, torch.tensor([seq]))[0].half().float())
    assert torch.allclose(got[:, d:], hs[1][0].half().float())


def test_a_fresh_fusion_drafts_exactly_as_the_last_layer_alone():
    model, head = tiny()
    X = torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    f = target_features(model, X)
    Fe = torch.cat([f, torch.randn_like(f)], -1)
    w, W = torch.ones(X.shape), model.lm_head.weight.detach()
    tcfg = te.TrainConfig(depth=2)
    with torch.no_grad():
        a, sa = tf.losses(head, tf.Fusion(head.d, 1), W, X, Fe, w, 1.0, tcfg)
        b, sb = tf.losses(head, None, W, X, Fe, w, 1.0, tcfg)
    assert torch.equal(a, b) and sa == sb


def test_a_fusion_adds_its_projection_of_the_normed_layers_to_the_feature():
    model, head = tiny()
    X = torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    f = target_features(model, X)
    fusion = tf.Fusion(head.d, 1)
    torch.nn.init.normal_(fusion.proj.weight, std=0.1)
    Fe = torch.cat([f, torch.randn_like(f)], -1)
    aux = torch.nn.functional.rms_norm(Fe[..., head.d:], (head.d,))
    assert torch.allclose(fusion(Fe) - f, fusion.proj(aux), atol=1e-5)


def test_a_fresh_second_layer_drafts_exactly_as_the_head_alone():
    model, head = tiny()
    X = torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    Fe = target_features(model, X)
    w, W = torch.ones(X.shape), model.lm_head.weight.detach()
    tcfg = te.TrainConfig(depth=3)
    with torch.no_grad():
        a, sa = tf.losses(tf.Deeper(head), None, W, X, Fe, w, 1.0, tcfg)
        b, sb = tf.losses(head, None, W, X, Fe, w, 1.0, tcfg)
    assert torch.allclose(a, b) and sa.keys() == sb.keys()


def test_only_the_arms_new_weights_take_the_scaled_lr():
    _, head = tiny()
    deep = tf.Deeper(head)
    groups = tf.param_groups(deep, None, 3.0)
    assert len(groups) == 2 and groups[1]["scale"] == 3.0
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in deep.extra.parameters()}
    assert len(tf.param_groups(head, None, 3.0)) == 1
