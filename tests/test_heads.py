"""Draft heads score exactly the rows they claim to."""
import torch

from core.config import SpecConfig
from core.decoding.heads import build_head, svd_factors

torch.manual_seed(0)
V, D = 300, 32
W = torch.randn(V, D)
H = torch.randn(5, D)


def test_svd_head_at_full_rank_reproduces_the_full_logits():
    up, down = svd_factors(W, D)
    torch.testing.assert_close((H @ down.T) @ up.T, H @ W.T, rtol=1e-4, atol=1e-4)


def test_frspec_head_scores_its_static_rows():
    ids = torch.tensor([3, 10, 299, 42])
    head = build_head("frspec", W, SpecConfig(method="frspec"), fr_ids=ids)
    torch.testing.assert_close(head.logits(H), H @ W[ids].T)
    assert head.in_vocab([10, 11]) == [True, False]


def test_nanospec_head_scores_exactly_the_active_vocabulary():
    head = build_head("nanospec", W, SpecConfig(method="nanospec", w_max=50))
    head.on_prefill(torch.tensor([5, 6, 7]), head.top_pre(torch.randn(3, V)))
    ids = head.active_ids()
    torch.testing.assert_close(head.logits(H), H @ W[ids].T)


def test_nanoslim_equals_slimspec_restricted_to_the_active_vocabulary():
    cfg = SpecConfig(method="nanoslim", w_max=40, rank=8)
    nano, slim = build_head("nanoslim", W, cfg), build_head("slimspec", W, cfg)
    nano.on_prefill(torch.tensor([1, 2, 3, 4]), nano.top_pre(torch.randn(4, V)))
    torch.testing.assert_close(nano.logits(H), slim.logits(H)[:, nano.active_ids()])


def test_full_head_has_no_restriction():
    head = build_head("full", W, SpecConfig(method="full"))
    assert head.active_ids() is None and head.n_active() == V
    torch.testing.assert_close(head.logits(H), H @ W.T)


def test_disabled_sources_never_enter_the_stream():
    head = build_head("nanospec", W, SpecConfig(method="nanospec", w_max=50, sources="draft,verify"))
    ev = head.on_prefill(torch.tensor([5, 6, 7]), head.top_pre(torch.randn(3, V)))
    assert ev.entered == [] and head.n_active() == 0
    ev = head.on_verify([9], torch.randn(2, V))
    assert {src for _, src in ev.entered} <= {"draft", "verify"} and 9 in head.active_ids().tolist()


def test_rescoring_slimspec_scores_the_union_of_each_rows_preview_top_m_with_the_full_rows():
    cfg = SpecConfig(method="slimspec", rank=4, rescore=7)
    head = build_head("slimspec", W, cfg)
    logits, ids = head.score(H)
    preview = head.logits(H).topk(7, dim=-1).indices
    assert set(ids.tolist()) == set(preview.reshape(-1).tolist())
    torch.testing.assert_close(logits, H @ W[ids].T)


def test_rescoring_nanoslim_keeps_its_candidates_inside_the_active_vocabulary():
    head = build_head("nanoslim", W, SpecConfig(method="nanoslim", w_max=40, rank=4, rescore=5))
    head.on_prefill(torch.tensor([1, 2, 3, 4]), head.top_pre(torch.randn(4, V)))
    logits, ids = head.score(H)
    assert set(ids.tolist()) <= set(head.active_ids().tolist())
    torch.testing.assert_close(logits, H @ W[ids].T)


def test_rescoring_every_row_gives_the_full_heads_argmax():
    head = build_head("slimspec", W, SpecConfig(method="slimspec", rank=2, rescore=V))
    logits, ids = head.score(H)
    assert torch.equal(ids[logits.argmax(-1)], (H @ W.T).argmax(-1))


def test_heads_without_rescoring_score_their_own_logits():
    for method in ("full", "slimspec"):
        head = build_head(method, W, SpecConfig(method=method, rank=4))
        logits, ids = head.score(H)
        assert ids is None and torch.equal(logits, head.logits(H))


def test_previewing_nanospec_scores_the_active_vocabulary_and_each_rows_low_rank_top_m():
    head = build_head("nanospec", W, SpecConfig(method="nanospec", w_max=40, rank=4, preview=6))
    head.on_prefill(torch.tensor([1, 2, 3, 4]), head.top_pre(torch.randn(4, V)))
    logits, ids = head.score(H)
    up, down = svd_factors(W, 4)
    preview = ((H @ down.T) @ up.T).topk(6, dim=-1).indices
    assert set(ids.tolist()) == set(head.active_ids().tolist()) | set(preview.reshape(-1).tolist())
    assert ids.unique().numel() == ids.numel()
    torch.testing.assert_close(logits, H @ W[ids].T)


def test_previewing_the_whole_vocabulary_gives_the_full_heads_argmax():
    head = build_head("nanospec", W, SpecConfig(method="nanospec", w_max=8, rank=2, preview=V))
    head.on_prefill(torch.tensor([1, 2]), head.top_pre(torch.randn(2, V)))
    logits, ids = head.score(H)
    assert torch.equal(ids[logits.argmax(-1)], (H @ W.T).argmax(-1))


def test_rescoring_applies_only_to_low_rank_heads():
    head = build_head("nanospec", W, SpecConfig(method="nanospec", w_max=40, rank=4, rescore=5, preview=6))
    head.on_prefill(torch.tensor([1, 2, 3, 4]), head.top_pre(torch.randn(4, V)))
    assert set(head.active_ids().tolist()) <= set(head.score(H)[1].tolist())
