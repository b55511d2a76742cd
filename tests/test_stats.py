"""core/trace/stats.py: one run's statistics, a group of runs' statistics and the table rows built from them
(hand-made StepRecords and rows, no model)."""
import pytest

from bench.suites import context as context_bench
from core.paper import runs as bench

from core.trace import stats
from core.trace.record import TIMERS, StepRecord


def step(emitted, accepted=(), origin=None, active=10, in_vocab=None, head_calls=2, ms=1.0):
    tree = {"tokens": [7] * 4, "parents": [-1] * 4, "logp": [0.0] * 4, "in_vocab": [True] * 4, "head_calls": head_calls}
    if origin:
        tree["origin"] = origin
    return StepRecord(step=1, kind="step", tree=tree, accepted=list(accepted), emitted=list(emitted),
                      emitted_in_vocab=in_vocab if in_vocab is not None else [True] * len(emitted),
                      stream={"entered": [], "left": [], "size_s": 0, "active": active},
                      timing_ms={k: ms for k in TIMERS})


def run(*steps):
    return [StepRecord(step=0, kind="prefill", emitted=[1], timing_ms={k: 0.5 for k in TIMERS}), *steps]


def row(category="c", method="nanospec", steps=1, step_tokens=1, wall_s=1.0, new_tokens=None, **kw):
    return {"category": category, "method": method, "variant": method, "steps": steps, "step_tokens": step_tokens,
            "new_tokens": step_tokens if new_tokens is None else new_tokens, "wall_s": wall_s,
            "timing_ms": {k: 0.0 for k in TIMERS}, **kw}


def test_run_totals_leave_the_prefill_out_of_steps_but_count_its_token():
    t = stats.run_totals(run(step([5, 6, 7], accepted=[0, 1]), step([8])))
    assert (t["steps"], t["step_tokens"], t["new_tokens"]) == (2, 4, 5)


def test_accepted_tokens_are_split_by_the_origin_of_their_tree_node():
    t = stats.run_totals(run(step([5, 6, 7], accepted=[0, 2], origin=["model", "model", "context", "context"])))
    assert (t["accept_model_sum"], t["accept_context_sum"]) == (1, 1)


def test_coverage_counts_emitted_tokens_inside_the_active_vocabulary():
    s = stats.summarize(run(step([5, 6], in_vocab=[True, False]), step([7], in_vocab=[True])))
    assert s["coverage"] == pytest.approx(2 / 3)


def test_a_run_summary_and_the_aggregate_of_its_row_agree():
    records = run(step([5, 6, 7], accepted=[0, 1], active=12), step([8], active=20))
    one, group = stats.summarize(records), stats.aggregate([stats.run_totals(records)])
    for key in ("mean_accept_len", "mean_active_vocab", "coverage", "lm_head_ms_per_call", "accept_model"):
        assert one[key] == group[key], key


def test_group_means_are_ratios_of_sums_so_every_step_weighs_once():
    a = stats.aggregate([row(steps=1, step_tokens=4), row(steps=3, step_tokens=3)])
    assert a["mean_accept_len"] == pytest.approx(7 / 4)  # not the mean of 4 and 1


def test_group_tokens_per_second_is_all_tokens_over_all_wall_time():
    a = stats.aggregate([row(new_tokens=10, wall_s=1.0), row(new_tokens=30, wall_s=3.0), row(new_tokens=0, wall_s=4.0)])
    assert a["tokens_per_s"] == pytest.approx(40 / 8)


def test_the_identical_fraction_counts_only_rows_with_a_verdict():
    a = stats.aggregate([row(identical=True, tie=False), row(identical=False, tie=True), row(identical=None)])
    assert (a["identical"], a["compared"], a["ties"]) == (1, 2, 1)


def test_rows_without_a_trace_count_as_zero_steps():
    a = stats.aggregate([{"category": "c", "variant": "hf", "new_tokens": 9, "wall_s": 3.0, "identical": True}])
    assert (a["tokens_per_s"], a["mean_accept_len"], a["coverage"]) == (3.0, 0.0, 0.0)


def test_a_tokens_per_second_ratio_needs_a_baseline():
    assert stats.tps_ratio({"tokens_per_s": 3.0}, {"tokens_per_s": 2.0}) == 1.5
    assert stats.tps_ratio({"tokens_per_s": 3.0}, None) == ""


def test_groups_are_per_category_then_all_with_methods_in_their_order():
    rows = [row("z", "full"), row("a", "nanospec"), row("a", "ar")]
    assert [k for k, _ in stats.groups(rows, "method", ("ar", "full", "nanospec"))] == [
        ("a", "ar"), ("a", "nanospec"), ("z", "full"), ("all", "ar"), ("all", "full"), ("all", "nanospec")]


def test_the_bench_summary_speedup_is_against_ar_in_the_same_category():
    rows = [row("a", "ar", wall_s=2.0, new_tokens=10), row("a", "nanospec", wall_s=1.0, new_tokens=10),
            row("b", "ar", wall_s=1.0, new_tokens=10), row("b", "nanospec", wall_s=1.0, new_tokens=10)]
    speed = {(r["category"], r["method"]): r["speedup_vs_ar"] for r in bench.summarize_rows(rows)}
    assert (speed[("a", "nanospec")], speed[("b", "nanospec")], speed[("all", "nanospec")]) == (2.0, 1.0, 1.5)


def test_the_bench_summary_has_its_columns_and_blanks_what_ar_does_not_have():
    ar = bench.summarize_rows([row("a", "ar")])[0]
    assert list(ar) == bench.SUMMARY_COLS
    assert (ar["mean_active_vocab"], ar["coverage"], ar["identical_to_ar_frac"], ar["ties"]) == ("", "", "", "")


def test_context_bench_leaves_step_means_blank_for_runs_without_a_trace():
    rows = [{"category": "c", "variant": "hf", "new_tokens": 9, "wall_s": 3.0, "identical": True}]
    out = context_bench.summarize_rows(rows)[0]
    assert list(out) == context_bench.COLS
    assert (out["mean_accept_len"], out["identical_to_ar"]) == ("", "1/1")
