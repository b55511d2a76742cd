"""Greedy speculative decoding emits exactly the target's own greedy tokens (tiny random models)."""
import pytest
import torch

from conftest import peaky_tiny
from core.config import SpecConfig
from core.decoding.draft import ModelDrafter
from core.decoding.engine import generate
from core.decoding.heads import build_head
from core.runtime.runner import EagerRunner
from core.trace.stats import compare_to_ar, tokens_of

pytestmark = pytest.mark.usefixtures("single_thread")
METHODS = ["full", "frspec", "nanospec", "slimspec", "nanoslim"]
PROMPT = torch.randint(0, 300, (14,), generator=torch.Generator().manual_seed(1)).tolist()


def run(target_model, draft_model, cfg, prompt=PROMPT):
    target = EagerRunner(target_model)
    if cfg.method == "ar":
        return list(generate(target, None, None, prompt, cfg))
    drafter = ModelDrafter(EagerRunner(draft_model))
    fr_ids = torch.arange(0, 300, 3)  # a static third of the vocabulary
    head = build_head(cfg.method, drafter.head_weight, cfg, fr_ids=fr_ids)
    return list(generate(target, drafter, head, prompt, cfg))


@pytest.fixture(scope="module")
def ar_records(tiny_target):
    return run(tiny_target, None, SpecConfig(method="ar", max_new_tokens=40))


@pytest.mark.parametrize("shape", ["tree", "chain"])
@pytest.mark.parametrize("method", METHODS)
def test_self_draft_greedy_equals_target_greedy(tiny_target, ar_records, method, shape):
    cfg = SpecConfig(method=method, shape=shape, max_new_tokens=40, w_max=48, rank=16)
    cmp = compare_to_ar(run(tiny_target, tiny_target, cfg), ar_records)
    assert cmp["identical"], cmp


@pytest.mark.parametrize("method", METHODS)
def test_separate_draft_model_greedy_equals_target_greedy(tiny_target, ar_records, method):
    cfg = SpecConfig(method=method, max_new_tokens=40, w_max=48, rank=16)
    cmp = compare_to_ar(run(tiny_target, peaky_tiny(seed=7), cfg), ar_records)
    assert cmp["identical"], cmp


@pytest.mark.parametrize("cfg", [
    SpecConfig(method="nanospec", w_max=1, k_pre=0, k_ver=0, max_new_tokens=30),
    SpecConfig(method="nanoslim", w_max=1, k_pre=0, k_ver=0, max_new_tokens=30, rank=8),
    SpecConfig(method="nanospec", depth=8, top_k=8, tree_size=128, max_new_tokens=30),
    SpecConfig(method="nanospec", window="fifo", w_max=5, max_new_tokens=30),
    SpecConfig(method="slimspec", rank=4, rescore=3, max_new_tokens=30),
    SpecConfig(method="nanoslim", w_max=48, rank=4, rescore=2, max_new_tokens=30),
    SpecConfig(method="nanospec", w_max=8, rank=4, preview=3, max_new_tokens=30),
], ids=["wmax1-nanospec", "wmax1-nanoslim", "max-tree", "fifo-window", "rescore-slimspec", "rescore-nanoslim",
        "preview-nanospec"])
def test_greedy_lossless_under_extreme_settings(tiny_target, cfg):
    ar = run(tiny_target, None, SpecConfig(method="ar", max_new_tokens=30))
    assert compare_to_ar(run(tiny_target, tiny_target, cfg), ar)["identical"]


def test_prompt_longer_than_w_max_stays_lossless(tiny_target):
    prompt = torch.randint(0, 300, (80,), generator=torch.Generator().manual_seed(3)).tolist()
    ar = run(tiny_target, None, SpecConfig(method="ar", max_new_tokens=20), prompt)
    spec = run(tiny_target, tiny_target, SpecConfig(method="nanospec", w_max=16, max_new_tokens=20), prompt)
    assert compare_to_ar(spec, ar)["identical"]


def test_run_stops_at_the_token_budget(tiny_target):
    recs = run(tiny_target, tiny_target, SpecConfig(method="full", max_new_tokens=7))
    assert len(tokens_of(recs)) == 7


def _pair(margin: float, tie_tol: float):
    from core.trace.record import StepRecord
    ar = [StepRecord(0, "ar", emitted=[1, 2, 3], margin=[1.0, 1.0, 1.0], tie_tol=[tie_tol] * 3)]
    spec = [StepRecord(0, "step", emitted=[1, 2, 4], margin=[1.0, 1.0, margin], tie_tol=[tie_tol] * 3)]
    return spec, ar


def test_a_divergence_at_a_near_tie_is_reported_as_a_tie_and_not_as_identical():
    cmp = compare_to_ar(*_pair(margin=5e-5, tie_tol=1e-4))
    assert not cmp["identical"] and cmp["tie"] and cmp["verdict"] == "tie at token 2"


def test_a_divergence_with_a_clear_margin_is_a_difference():
    cmp = compare_to_ar(*_pair(margin=0.5, tie_tol=1e-4))
    assert not cmp["identical"] and not cmp["tie"] and cmp["verdict"] == "differs at token 2"


def test_the_tie_rule_fires_for_bf16_scale_gaps_and_not_for_fp32_ones():
    from core.trace.stats import tie_tolerance
    top, gap = 20.0, 0.125  # one bf16 rounding step at |logit| = 20
    assert compare_to_ar(*_pair(gap, tie_tolerance(top, eps=2 ** -7)))["tie"]
    assert not compare_to_ar(*_pair(gap, tie_tolerance(top, eps=2 ** -23)))["tie"]


def test_a_shorter_run_is_not_identical():
    spec, ar = _pair(margin=1.0, tie_tol=1e-4)
    spec[0].emitted = [1, 2]
    cmp = compare_to_ar(spec, ar)
    assert not cmp["identical"] and cmp["first_diff"] == 2


@pytest.mark.parametrize("method", ["nanospec", "slimspec", "nanoslim"])
def test_triton_backend_under_the_interpreter_stays_lossless(tiny_target, method):
    ar = run(tiny_target, None, SpecConfig(method="ar", max_new_tokens=16))
    cfg = SpecConfig(method=method, backend="triton", max_new_tokens=16, w_max=48, rank=16)
    assert compare_to_ar(run(tiny_target, tiny_target, cfg), ar)["identical"]


def test_a_stop_request_ends_the_run_marked_with_its_reason(tiny_target):
    target, drafter = EagerRunner(tiny_target), ModelDrafter(EagerRunner(tiny_target))
    cfg = SpecConfig(method="full", max_new_tokens=40)
    calls = iter([False, False, "time limit"])
    recs = list(generate(target, drafter, build_head("full", drafter.head_weight, cfg), PROMPT, cfg,
                         should_stop=lambda: next(calls)))
    assert recs[-1].cut == "time limit" and len(recs) == 3


class TakesAllIn(ModelDrafter):
    """A draft model that drops its drafts at every rollback and takes every emitted token in again."""

    def rollback(self, keep=()) -> int:
        return super().rollback(())


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_a_draft_model_keeps_its_accepted_drafts_and_drafts_as_if_it_had_taken_them_in(tiny_target, ar_records, shape):
    cfg = SpecConfig(method="full", shape=shape, gamma=3, max_new_tokens=40, context="off")  # a self-draft
    runs = []
    for drafter_class in (ModelDrafter, TakesAllIn):
        drafter = drafter_class(EagerRunner(tiny_target))
        head = build_head(cfg.method, drafter.head_weight, cfg)
        runs.append(list(generate(EagerRunner(tiny_target), drafter, head, PROMPT, cfg)))
    kept, again = runs
    held, most = [r.tree["held"] for r in kept[1:]], [min(len(r.accepted), 3 - 1) for r in kept[1:]]  # depth 3
    # a chain expands every level but the last; a tree only each level's k best, which the accepted node may not be
    assert held == most if shape == "chain" else all(h <= m for h, m in zip(held, most)) and sum(held) > len(held)
    assert all(r.tree["held"] == 0 for r in again[1:])
    assert [r.tree["tokens"] for r in kept[1:]] == [r.tree["tokens"] for r in again[1:]]
    assert compare_to_ar(kept, ar_records)["identical"]


class CountsLogitRows(EagerRunner):
    """A runner that records how many rows each logits call computes."""

    def __init__(self, model):
        super().__init__(model)
        self.rows = []

    def logits(self, hidden):
        self.rows.append(hidden.shape[0])
        return super().logits(hidden)


@pytest.mark.parametrize("method, prompt_rows", [("ar", 0), ("full", 0), ("nanospec", len(PROMPT) - 1)])
def test_the_prefill_computes_the_roots_logits_alone_unless_the_stream_reads_every_prompt_row(tiny_target, method,
                                                                                              prompt_rows):
    cfg = SpecConfig(method=method, max_new_tokens=4, context="off", w_max=48)
    target = CountsLogitRows(tiny_target)
    drafter = ModelDrafter(EagerRunner(tiny_target)) if method != "ar" else None
    head = build_head(method, drafter.head_weight, cfg) if drafter else None
    list(generate(target, drafter, head, PROMPT, cfg))
    assert target.rows[:2 if prompt_rows else 1] == [1] + ([prompt_rows] if prompt_rows else [])
