"""Context drafting (core/decoding/context.py) merged into the draft tree: suffix matches, the merged tree's mask,
greedy losslessness with context on, and the target distribution under sampling (χ²)."""
import random

import pytest
import torch

from conftest import peaky_tiny
from core.config import SpecConfig
from core.decoding.context import Branch, ContextDrafter
from core.decoding.draft import ModelDrafter
from core.decoding.engine import generate
from core.decoding.heads import build_head
from core.runtime.runner import EagerRunner
from core.trace.stats import compare_to_ar, summarize
from core.decoding.tree import Tree, accept_greedy, merge_context, verify_inputs
from test_sampling import DRAFT, TARGET, BigramRunner, chi2_pvalue, exact_joint

pytestmark = pytest.mark.usefixtures("single_thread")
METHODS = ["full", "frspec", "nanospec", "slimspec", "nanoslim"]
# a prompt that repeats itself, so the context drafter has matches from the first step
PROMPT = (torch.randint(0, 300, (10,), generator=torch.Generator().manual_seed(2)).tolist() * 3)[:26]


def test_longest_suffix_match_proposes_what_followed_it_last():
    ctx = ContextDrafter([1, 2, 3, 4, 9, 2, 3, 5, 7, 1, 2, 3], max_len=3)
    first = ctx.propose()[0]
    assert first.n == 3 and first.tokens == [4, 9, 2]  # "1 2 3" matched (not the shorter, later "2 3" -> 5)


def test_no_match_proposes_nothing():
    assert ContextDrafter([1, 2, 3, 4]).propose() == []


def test_acceptance_rate_learns_from_the_target():
    ctx = ContextDrafter([5, 6, 7, 5, 6], max_n=2)
    before = ctx.alpha(2)
    b = ctx.propose()[0]
    assert b.n == 2 and b.tokens[0] == 7
    ctx.update([8])  # the target disagrees
    assert ctx.alpha(2) < before


def random_tree(rng, n) -> Tree:
    """A model tree: siblings hold distinct tokens, scores fall along every path."""
    t = Tree()
    for _ in range(n):
        par, tok = rng.randrange(-1, len(t)), rng.randrange(20)
        if tok not in [t.tokens[c] for c in t.children(par)]:
            lp = -rng.random()
            t.add(tok, par, lp, lp + (0.0 if par < 0 else t.score[par]))
    return t


def brute_force_mask(t: Tree) -> torch.Tensor:
    """[1+k, 1+k]: row i sees j iff j is i, the root, or an ancestor of i."""
    n = len(t) + 1
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        m[i, 0] = m[i, i] = True
        a = t.parents[i - 1] if i else -1
        while a >= 0:
            m[i, a + 1] = True
            a = t.parents[a]
    return m


@pytest.mark.parametrize("seed", range(20))
def test_merged_tree_mask_and_positions_match_a_brute_force_reference(seed):
    rng = random.Random(seed)
    t = random_tree(rng, rng.randrange(0, 8))
    branches = [Branch([rng.randrange(20) for _ in range(rng.randrange(1, 6))], [-0.3] * 5, 2) for _ in range(2)]
    merged = merge_context(t, branches, size=rng.randrange(0, 8), extra=rng.randrange(0, 8), sampling=False)
    ids, pos, mask = verify_inputs(merged, 0, 100)
    assert torch.equal(mask, brute_force_mask(merged))
    depth = [0] + [1 + (0 if p < 0 else depth_of(merged, p)) for p in merged.parents]
    assert pos.tolist() == [100 + d for d in depth]
    assert len({(p, tok) for p, tok in zip(merged.parents, merged.tokens)}) == len(merged)  # shared prefixes merged
    assert all(p < i for i, p in enumerate(merged.parents))


def depth_of(t, i):
    return 1 if t.parents[i] < 0 else 1 + depth_of(t, t.parents[i])


def test_greedy_acceptance_follows_the_argmax_and_returns_the_two_largest_logits_of_each_row_it_read():
    t = Tree()
    a = t.add(5, -1, 0.0, 0.0)
    t.add(7, a, 0.0, 0.0)
    t.add(3, -1, 0.0, 0.0)
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(0))
    logits[0, 5], logits[1, 2] = 9.0, 9.0  # root -> 5 (node 0) accepted; node 0 wants 2, which is not its child 7
    path, bonus, top = accept_greedy(t, logits)
    assert (path, bonus) == ([0], 2)
    assert torch.equal(top, logits[[0, 1]].topk(2, dim=-1).values)


def test_a_branch_shares_the_prefix_the_model_tree_already_holds():
    t = Tree()
    a = t.add(7, -1, -0.1, -0.1)
    t.add(8, a, -0.2, -0.3)
    merged = merge_context(t, [Branch([7, 8, 9], [-0.5] * 3, 3)], size=2, extra=4, sampling=False)
    assert merged.tokens == [7, 8, 9] and merged.parents == [-1, 0, 1]
    assert merged.origin == ["model", "model", "context"]


def run(cfg, drafter_model, prompt=PROMPT):
    target = EagerRunner(peaky_tiny(0))
    if cfg.method == "ar" or drafter_model is None:
        return list(generate(target, None, None, prompt, cfg))
    drafter = ModelDrafter(EagerRunner(drafter_model))
    head = build_head(cfg.method, drafter.head_weight, cfg, fr_ids=torch.arange(0, 300, 3))
    return list(generate(target, drafter, head, prompt, cfg))


@pytest.fixture(scope="module")
def ar():
    return run(SpecConfig(method="ar", max_new_tokens=40), None)


@pytest.mark.parametrize("shape", ["tree", "chain"])
@pytest.mark.parametrize("method", METHODS)
def test_greedy_with_context_equals_target_greedy(ar, method, shape):
    cfg = SpecConfig(method=method, shape=shape, context="on", max_new_tokens=40, w_max=48, rank=16)
    recs = run(cfg, peaky_tiny(7))
    assert compare_to_ar(recs, ar)["identical"]
    assert summarize(recs)["accept_context"] > 0  # the context branches were used, not just present


def test_context_alone_is_prompt_lookup_and_equals_target_greedy(ar):
    recs = run(SpecConfig(method="nanospec", context="on", max_new_tokens=40), None)
    assert compare_to_ar(recs, ar)["identical"]
    origins = {o for r in recs for o in r.tree.get("origin", [])}
    assert origins == {"context"} and summarize(recs)["accept_model"] == 0


def test_every_node_has_an_origin_in_the_trace():
    recs = run(SpecConfig(method="nanospec", context="on", max_new_tokens=20), peaky_tiny(7))
    for r in recs[1:]:
        assert len(r.tree["origin"]) == len(r.tree["tokens"])


N = 1500


@pytest.mark.parametrize("draft", ["model", "context alone"])
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_sampling_with_context_keeps_the_target_distribution(draft, shape):
    counts, n_ctx = {}, 0
    for seed in range(N):
        cfg = SpecConfig(method="nanospec", shape=shape, context="on", temperature=1.0, max_new_tokens=3, seed=seed,
                         w_max=3, k_pre=1, k_ver=1, gamma=2, depth=2, top_k=2, tree_size=4, timing=False)
        drafter = ModelDrafter(BigramRunner(DRAFT)) if draft == "model" else None
        head = build_head("nanospec", drafter.head_weight, cfg) if drafter else None
        recs = list(generate(BigramRunner(TARGET), drafter, head, [0, 1, 2, 0, 1, 3, 0], cfg))
        toks = tuple(t for r in recs for t in r.emitted)[:3]
        n_ctx += sum(o == "context" for r in recs for o in r.tree.get("origin", []))
        counts[toks] = counts.get(toks, 0) + 1
    assert n_ctx > N // 4  # context nodes were proposed and verified, not just possible
    assert chi2_pvalue(counts, exact_joint(1.0), N) > 1e-3


def test_tree_view_marks_context_nodes():
    from viz.tree import tree_svg
    rec = {"step": 1, "tree": {"tokens": [5, 6, 7], "parents": [-1, 0, -1], "logp": [-0.1, -0.2, -0.5],
                               "origin": ["model", "model", "context"]}, "accepted": [2], "emitted": [7, 9]}
    svg = tree_svg(rec, {})
    assert svg.count("node-ctx") == 1 and svg.count("ctx-dot") == 1
    rec["tree"].pop("origin")  # traces written before origins: all model
    assert "node-ctx" not in tree_svg(rec, {})


@pytest.mark.parametrize("i, shape, alone", [(2, "tree", False), (6, "chain", False), (5, "tree", True)])
def test_default_model_greedy_with_context_equals_plain_greedy(default_pipeline, i, shape, alone):
    from core.prompts import example_prompts
    pipe, prompt = default_pipeline, example_prompts()[i]
    ar = list(pipe.run(prompt.text, SpecConfig(method="ar", max_new_tokens=32)))
    cfg = SpecConfig(method="nanospec", shape=shape, context="on", max_new_tokens=32)
    if alone:  # context drafting alone on the same target
        spec = list(generate(pipe.target, None, None, pipe.prompt_ids(prompt.text), cfg, pipe.eos_ids()))
    else:
        spec = list(pipe.run(prompt.text, cfg))
    assert compare_to_ar(spec, ar)["identical"], f"{prompt.category}/{shape}"


def test_bench_results_written_before_context_drafting_count_as_context_off():
    from core.paper.runs import _with_defaults
    old = SpecConfig().to_dict()
    del old["context"], old["context_len"]
    assert _with_defaults({"configs": {"nanospec": old}})["configs"]["nanospec"]["context"] == "off"


def _switch_after_warmup(model_ms: float, model_tokens_per_step: float):
    from core.decoding.context import ModelSwitch
    sw = ModelSwitch()
    for drafted in (True,) * sw.WARM + (False,) * sw.WARM:
        sw.observe(drafted, model_ms if drafted else 10.0, model_tokens_per_step if drafted else 0)
    sw.steps = 0
    ctx = ContextDrafter()
    return sw, [sw.use_model(ctx, []) for _ in range(64)]


def test_a_model_that_never_pays_is_drafted_only_once_every_far_exploration_period():
    sw, choices = _switch_after_warmup(model_ms=20.0, model_tokens_per_step=0.3)  # 1.3 tokens / 20 ms < 1 / 10 ms
    assert sum(choices) == 64 // (sw.EXPLORE * sw.FAR)


def test_a_close_call_is_explored_every_explore_period():
    sw, choices = _switch_after_warmup(model_ms=15.0, model_tokens_per_step=0.4)  # 1.4 / 15 vs 1 / 10: within CLOSE
    assert sum(choices) == 64 // sw.EXPLORE


def test_a_model_that_pays_is_drafted_except_at_exploration_steps():
    sw, choices = _switch_after_warmup(model_ms=12.0, model_tokens_per_step=1.5)
    assert 64 - sum(choices) == 64 // (sw.EXPLORE * sw.FAR)


def test_a_calibrated_switch_starts_from_the_calibrations_choice_without_warming_up():
    from core.decoding.context import ModelSwitch, SwitchPrior
    loses = SwitchPrior(ms=((30.0, 200.0), (50.0, 210.0)), model_tokens=(2.7, 2.3))  # the pair on an AMD EPYC
    pays = SwitchPrior(ms=((10.0, 12.0), (12.0, 14.0)), model_tokens=(1.5, 1.0))
    ctx = ContextDrafter()
    first = [ModelSwitch(loses).use_model(ctx, []) for _ in range(1)] + [ModelSwitch(pays).use_model(ctx, [])]
    assert first == [False, True]  # without a prior the first WARM steps draft the model whatever it costs
    sw = ModelSwitch(loses)
    assert sum(sw.use_model(ctx, []) for _ in range(64)) == 64 // (sw.EXPLORE * sw.FAR)


def test_a_calibrated_switch_follows_what_the_run_measures():
    from core.decoding.context import ModelSwitch, SwitchPrior
    sw, ctx = ModelSwitch(SwitchPrior(ms=((10.0, 12.0), (12.0, 14.0)), model_tokens=(1.5, 1.0))), ContextDrafter()
    for _ in range(12):  # this run's model steps cost 5x the calibration's
        sw.use_model(ctx, [])
        sw.observe(True, 60.0, 1)
    assert sum(sw.use_model(ctx, []) for _ in range(64)) <= 64 // sw.EXPLORE


def test_the_switch_weighs_the_model_apart_on_steps_with_and_without_a_context_branch():
    from core.decoding.context import ModelSwitch
    sw, ctx = ModelSwitch(), ContextDrafter([1, 2, 3, 1, 2])
    branch = ctx.propose()
    assert branch, "the history's suffix 1 2 continues with 3"
    costs = {0: ((10.0, 0), (12.0, 0.1)), 1: ((12.0, 0), (14.0, 1.0))}  # (ms, model tokens) without / with the model
    for branches in ([], branch):
        for _ in range(2 * sw.WARM):
            drafted = sw.use_model(ctx, branches)
            sw.observe(drafted, *costs[bool(branches)][drafted])
    plain = sum(sw.use_model(ctx, []) for _ in range(64))
    beside = sum(sw.use_model(ctx, branch) for _ in range(64))
    assert plain <= 64 // sw.EXPLORE  # 1.1 tokens in 12 ms lose to 1 in 10 ms; pooled means (11 vs 13 ms) chose the model
    assert beside >= 64 - 64 // sw.EXPLORE  # a whole model token for 2 ms more beside the branch pays
