"""The cost model of a speculative step (core/cost/model.py) and the acceptance reduction it reads
(core.trace.stats.acceptance_counts)."""
import pytest

from core.cost import model as cost
from core.cost.model import (Acceptance, Costs, Shape, best_shape, break_even_tau, expected_accepted, interpolate,
                             predicted_speedup, run_speedup, shape_grid, step_ms)
from core.trace.record import StepRecord
from core.trace.stats import acceptance_counts, acceptance_rates


def flat_costs(verify=10.0, per_row=0.5, backbone=2.0, head=1.0) -> Costs:
    return Costs(verify=[verify + per_row * (n - 1) for n in range(1, 33)], backbone=[backbone] * 8,
                 head={"full": [head] * 8}, other=0.0)


def test_a_chain_accepts_the_product_of_its_rates():
    acc = Acceptance([[0.8], [0.5], [0.5]])
    assert expected_accepted(acc, Shape(3, 1, 3)) == pytest.approx(0.8 + 0.4 + 0.2)


def test_a_tree_expands_the_best_nodes_of_each_level_and_keeps_the_best_size():
    acc = Acceptance([[0.6, 0.3], [0.5, 0.2]])
    # level 1: 0.6, 0.3; level 2: 0.3, 0.12 (under 0.6), 0.15, 0.06 (under 0.3); keep the best 4
    assert expected_accepted(acc, Shape(2, 2, 4)) == pytest.approx(0.6 + 0.3 + 0.3 + 0.15)
    assert expected_accepted(acc, Shape(2, 2, 6)) == pytest.approx(0.6 + 0.3 + 0.3 + 0.12 + 0.15 + 0.06)


def test_positions_past_the_measured_table_are_never_accepted():
    assert expected_accepted(Acceptance([[1.0]]), Shape(4, 3, 12)) == pytest.approx(1.0)


def test_the_step_pays_for_the_intake_every_level_and_the_verify_rows():
    c = flat_costs(verify=10.0, per_row=0.5, backbone=2.0, head=1.0)
    # intake 2 + first head 1 + 2 levels x (2 + 1) + verify over 7 rows 13
    assert step_ms(c, "full", Shape(3, 2, 6), intake=2.0) == pytest.approx(2 + 1 + 6 + 13)


def test_a_perfect_free_draft_speeds_up_by_its_tokens_per_step():
    c = Costs(verify=[10.0] * 32, backbone=[0.0] * 8, head={"full": [0.0] * 8})
    assert predicted_speedup(c, Acceptance([[1.0]] * 4), "full", Shape(4, 1, 4)) == pytest.approx(5.0)


def test_break_even_is_the_tau_at_which_speculation_matches_plain_decoding():
    c, s = flat_costs(), Shape(3, 2, 6)
    tau = break_even_tau(c, "full", s)
    assert tau * c.verify[0] == pytest.approx(step_ms(c, "full", s, tau), rel=1e-3)


def test_a_whole_run_adds_the_prefills_both_pay_and_the_drafters_that_speculation_alone_pays():
    # plain: 100 + 9 x 10 = 190; speculation: 100 + 20 + 9 / 2 x 15 = 187.5
    assert run_speedup(10.0, 2.0, 15.0, 10, 100.0, 20.0) == pytest.approx(190 / 187.5)
    assert run_speedup(10.0, 2.0, 15.0, 100_000, 100.0, 20.0) == pytest.approx(2 * 10 / 15, rel=1e-3)  # steady state


def test_prefill_costs_are_read_between_and_beyond_the_measured_prompt_lengths():
    xs, ys = [16, 64, 160], [10.0, 30.0, 50.0]
    assert interpolate(xs, ys, 40) == pytest.approx(20.0)
    assert interpolate(xs, ys, 112) == pytest.approx(40.0)
    assert interpolate(xs, ys, 256) == pytest.approx(70.0) and interpolate(xs, ys, 4) == pytest.approx(5.0)


def per_row_costs(backbone: float, head: float) -> Costs:
    return Costs(verify=[10 + 0.5 * (n - 1) for n in range(1, 33)], backbone=[backbone * w for w in range(1, 9)],
                 head={"full": [head * w for w in range(1, 9)]})


def test_a_cheap_draft_gets_a_deep_tree_and_a_costly_one_a_short_chain():
    acc = Acceptance([[0.7, 0.2, 0.1, 0.05]] * 6)
    cheap, _ = best_shape(per_row_costs(0.05, 0.02), acc, "full")
    costly, x = best_shape(per_row_costs(1.0, 0.5), acc, "full")
    assert cheap.depth >= 4 and cheap.top_k >= 2 and costly.chain and costly.depth <= 3
    assert x == max(predicted_speedup(per_row_costs(1.0, 0.5), acc, "full", s) for s in shape_grid())


def test_the_grid_holds_every_shape_the_issue_searches():
    grid = shape_grid()
    assert Shape(6, 4, 16) in grid and Shape(2, 2, 4) in grid and Shape(1, 1, 1) in grid and Shape(6, 1, 6) in grid
    assert all(s.depth <= s.size <= s.depth * s.top_k for s in grid if not s.chain)


def test_a_shape_names_the_config_fields_that_run_it():
    assert Shape(4, 1, 4).config() == {"shape": "chain", "gamma": 4}
    assert Shape(3, 2, 6).config() == {"shape": "tree", "depth": 3, "top_k": 2, "tree_size": 6}


def step(parents, logp, accepted, origin=None) -> StepRecord:
    return StepRecord(step=1, kind="step", accepted=accepted,
                      tree={"tokens": list(range(len(parents))), "parents": parents, "logp": logp,
                            "in_vocab": [True] * len(parents), "origin": origin or ["model"] * len(parents)})


def test_acceptance_counts_nodes_by_depth_and_sibling_rank_under_accepted_parents():
    # root -> 0 (rank 0, accepted), 1 (rank 1); 0 -> 2 (rank 1), 3 (rank 0, accepted); 1 -> 4 (parent rejected)
    rec = step([-1, -1, 0, 0, 1], [-0.1, -2.0, -3.0, -0.5, -0.2], accepted=[0, 3])
    c = acceptance_counts([rec], depth=3, ranks=2)
    assert c["tried"] == [[1, 1], [1, 1], [0, 0]] and c["accepted"] == [[1, 0], [1, 0], [0, 0]]
    assert acceptance_rates(c) == [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]


def test_acceptance_leaves_out_context_nodes_and_the_prefill():
    rec = step([-1, -1], [-0.1, -0.2], accepted=[1], origin=["model", "context"])
    c = acceptance_counts([StepRecord(step=0, kind="prefill"), rec], depth=2, ranks=2)
    assert c["tried"][0] == [1, 0] and c["accepted"][0] == [0, 0]


def test_a_mean_row_count_reads_the_curve_between_its_whole_counts():
    c = Costs(verify=[5.0, 6.0, 9.0], backbone=[1.0], head={})
    assert c.at_rows(c.verify, 2.5) == pytest.approx(7.5) and c.at_rows(c.verify, 1) == 5.0
    assert c.at_rows(c.verify, 3.5) == pytest.approx(10.5)  # past the end: the last segment's slope


def test_model_switch_drafts_the_winning_choice_and_explores_the_other_more_often_when_close():
    assert cost.model_share(2.0) == 1 - 1 / 32 and cost.model_share(0.5) == 1 / 32
    assert cost.model_share(1.1) == 1 - 1 / 8 and cost.model_share(0.9) == 1 / 8


def test_with_context_the_model_drafts_where_it_pays_and_the_context_where_it_does():
    plain, model, ctx, both = (1.0, 10.0), (3.0, 15.0), (2.0, 12.0), (3.0, 30.0)  # model: 2× plain; both: 0.5× ctx
    p = 1 - 1 / 32  # either side wins by more than CLOSE: the other is explored every 32nd step
    assert cost.switched(plain, model, ctx, both, f=0.0) == pytest.approx((p * 3 + (1 - p) * 1, p * 15 + (1 - p) * 10))
    assert cost.switched(plain, model, ctx, both, f=1.0) == pytest.approx((p * 2 + (1 - p) * 3, p * 12 + (1 - p) * 30))


def test_the_drafter_catches_up_on_every_token_since_the_models_last_step():
    assert cost.catch_up(1.5, 1 / 32) == pytest.approx(48.0) and cost.catch_up(3.0, 1.0) == 3.0


def test_both_drafts_count_the_models_tokens_where_the_contexts_first_is_rejected():
    assert cost.both_tau(2.0, 3.0) == pytest.approx(2.0 + 2.0 * 0.5)  # α_c = 1 − 1/τ_c = 0.5


def test_the_drafts_engine_scale_multiplies_the_draft_and_nothing_else():
    c, s = flat_costs(), Shape(3, 2, 6)
    scaled = Costs(**(c.__dict__ | {"draft_scale": 2.0}))
    assert step_ms(scaled, "full", s, 2.0) - step_ms(c, "full", s, 2.0) == pytest.approx(cost.draft_ms(c, "full", s, 2.0))


def test_the_ceiling_is_the_best_chain_of_a_draft_the_target_always_accepts():
    c = flat_costs(verify=10.0, per_row=0.5, backbone=2.0, head=1.0)
    shape, x = cost.ceiling(c, "full")
    sure = Acceptance([[1.0]] * 6)
    assert shape.chain and x == pytest.approx(predicted_speedup(c, sure, "full", shape))
    assert x >= max(predicted_speedup(c, Acceptance([[0.6, 0.3, 0.1]] * 6), "full", s) for s in shape_grid())


def test_a_draft_as_costly_as_the_target_has_a_ceiling_below_plain_decoding():
    c = Costs(verify=[10.0 + n for n in range(32)], backbone=[10.0] * 8, head={"full": [0.0] * 8})
    assert cost.ceiling(c, "full")[1] < 1.0


def test_a_drafter_that_keeps_its_accepted_drafts_takes_in_only_the_rest():
    acc, s = Acceptance([[0.8], [0.5], [0.5]]), Shape(3, 1, 3)
    assert cost.expected_held(acc, s) == pytest.approx(0.8 + 0.4)  # the expanded levels: depths 1 and 2, not 3
    tau = 1 + expected_accepted(acc, s)
    keeps = Costs(verify=[10.0] * 32, backbone=[2.0 * w for w in range(1, 9)], head={"full": [0.0] * 8}, keeps=True)
    takes_all = Costs(verify=[10.0] * 32, backbone=keeps.backbone, head=keeps.head)
    assert cost.intake(keeps, acc, s, tau) == pytest.approx(tau - 1.2) and cost.intake(takes_all, acc, s, tau) == tau
    assert predicted_speedup(keeps, acc, "full", s) > predicted_speedup(takes_all, acc, "full", s)
