"""A calibration's files and what the cost model predicts and chooses from them (core/cost/store.py, predict.py,
choose.py) on a tiny random pipeline: where a calibration is kept, the predictions the CLI and bench print from it,
the probe's re-reading, the switch's start and `--shape auto`. Measuring one: tests/test_calibrate.py."""
import json

import pytest
import torch

from core.config import SpecConfig
from core.cost import choose, predict, store
from core.cost import model as cost
from core.errors import SpecError
from core.models import draft_defaults
from core.paths import write_atomic
from cost_cases import measured_costs, quick_args, tiny_pipe  # noqa: F401  (the fixtures costs, args, pipe)


def test_a_calibration_belongs_to_one_machine_model_runtime_and_thread_count(pipe, monkeypatch):
    base = store.costs_path(store.calibration_key(pipe))
    monkeypatch.setenv("SPECLENS_CPU_ISA", "avx2")
    assert store.costs_path(store.calibration_key(pipe)) != base
    monkeypatch.delenv("SPECLENS_CPU_ISA")
    old = torch.get_num_threads()
    torch.set_num_threads(old + 1)
    try:
        assert store.costs_path(store.calibration_key(pipe)) != base
    finally:
        torch.set_num_threads(old)
    assert store.costs_path(store.calibration_key(pipe)) == base


def test_a_calibration_goes_stale_when_the_kernels_code_changes(pipe, monkeypatch):
    from core.kernels.cpu import cpu_layer
    base = store.costs_path(store.calibration_key(pipe))
    monkeypatch.setattr(cpu_layer, "sources_id", lambda: "another-build")
    assert store.costs_path(store.calibration_key(pipe)) != base


def test_the_prediction_says_how_to_calibrate_where_nothing_is_cached(pipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    p = choose.prediction(pipe, SpecConfig(method="nanospec"))
    assert p["predicted_speedup"] is None and "python -m core calibrate --acceptance" in p["prediction_note"]


def test_the_prediction_reads_the_cached_calibration(pipe, costs, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    write_atomic(store.costs_path(store.calibration_key(pipe)), json.dumps(costs))
    acc = {"heads": {"nanospec": {"a": [[0.9, 0.1]] * 6}}}
    write_atomic(store.acceptance_path(pipe), json.dumps(acc))
    p = choose.prediction(pipe, SpecConfig(method="nanospec", shape="chain", gamma=3))
    assert p["predicted_tau"] == pytest.approx(1 + 0.9 + 0.81 + 0.729, abs=1e-3)
    assert p["predicted_speedup"] > 0 and p["break_even_tau"] > 1 and p["prediction_note"] == ""
    whole = choose.prediction(pipe, SpecConfig(method="nanospec", shape="chain", gamma=3, max_new_tokens=8), 24)
    assert whole["predicted_speedup"] != whole["predicted_step_speedup"]  # a short run pays its prefills
    assert whole["prediction_note"] == ""


def linear_costs(t1: float, per_row: float, b1: float, per_w: float) -> dict:
    """A calibration whose target pass costs t1 + per_row (n − 1) ms and drafter pass b1 + per_w (w − 1)."""
    verify = [t1 + per_row * n for n in range(32)]
    return {"verify": verify, "verify_by_context": {"64": verify, "512": verify},
            "backbone": [b1 + per_w * w for w in range(8)], "head": {"nanospec": [0.5] * 8},
            "prefill": {"rows": [16, 64], "target": [t1 + 15 * per_row, t1 + 63 * per_row], "draft": [b1 + 15 * per_w] * 2}}


def test_an_anchor_scales_the_one_row_pass_and_the_rows_past_it_apart():
    data = linear_costs(10.0, 4.0, 2.0, 1.0)  # now: t(1) 12 (×1.2), 8 ms a row (×2); drafter w=1 3 (×1.5), rows ×1
    probe = {"n_ctx": 64, "target": {"rows": [1, 9], "ms": [12.0, 12.0 + 8 * 8]}, "draft": {"rows": [1, 4], "ms": [3.0, 6.0]}}
    held = predict.anchored(data, probe)
    assert held["verify"][:4] == pytest.approx([12.0, 20.0, 28.0, 36.0])
    assert held["verify_by_context"]["512"][8] == pytest.approx(76.0)
    assert held["backbone"][:3] == pytest.approx([3.0, 4.0, 5.0]) and held["head"]["nanospec"][0] == pytest.approx(0.75)
    assert held["prefill"]["target"][0] == pytest.approx(12.0 + 15 * 8.0)  # a prompt's rows are past the first too
    assert data["verify"][1] == 14.0  # the calibration itself is left as it was


def test_a_probe_that_reads_the_calibrations_own_costs_changes_no_prediction():
    data = linear_costs(10.0, 4.0, 2.0, 1.0)
    probe = {"n_ctx": 64, "target": {"rows": [1, 9], "ms": [10.0, 42.0]}, "draft": {"rows": [1, 4], "ms": [2.0, 5.0]}}
    held = predict.anchored(data, probe)
    for k in ("verify", "backbone"):
        assert held[k] == pytest.approx(data[k])
    assert predict.anchored(data, None) is data


def test_a_prediction_anchored_to_a_slower_moment_predicts_a_slower_plain_step(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.1]] * 6)
    cfg = SpecConfig(method="nanospec", shape="chain", gamma=3)
    c = costs["verify_by_context"]["8"]  # every pass twice the calibration's
    slow = {"n_ctx": 8, "target": {"rows": [1, 5], "ms": [2 * c[0], 2 * c[4]]}}
    assert choose.prediction(pipe, cfg, probe=slow)["predicted_ar_ms"] == pytest.approx(
        choose.prediction(pipe, cfg)["predicted_ar_ms"] + costs["verify"][0], abs=0.02)


def test_bench_summary_rows_get_the_prediction_beside_the_measured_speedup(pipe, costs, tmp_path, monkeypatch):
    from core.paper.runs import add_predictions
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    cfgs = {"ar": SpecConfig(method="ar"), "nanospec": SpecConfig(method="nanospec")}
    rows = [{"method": "ar", "predicted_speedup": ""}, {"method": "nanospec", "predicted_speedup": ""}]
    add_predictions(rows, pipe, cfgs)
    assert [r["predicted_speedup"] for r in rows] == ["", ""]  # nothing calibrated yet
    write_atomic(store.costs_path(store.calibration_key(pipe)), json.dumps(costs))
    write_atomic(store.acceptance_path(pipe), json.dumps({"heads": {"nanospec": {"a": [[0.5]]}}}))
    add_predictions(rows, pipe, cfgs)
    assert rows[0]["predicted_speedup"] == "" and rows[1]["predicted_speedup"] > 0


# ---------------------------------------------------------------- --shape auto

def calibrated(pipe, costs, tmp_path, monkeypatch, a, context=None):
    """This machine's costs and an acceptance table a[d][r] for nanospec (and the context alone's τ, rows)."""
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    write_atomic(store.costs_path(store.calibration_key(pipe)), json.dumps(costs))
    acc = {"heads": {"nanospec": {"a": a}}} | ({"context": context} if context else {})
    write_atomic(store.acceptance_path(pipe), json.dumps(acc))


def test_auto_without_a_calibration_runs_the_models_measured_shape_and_says_how_to_calibrate(pipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto"))
    assert (cfg.shape, cfg.depth, cfg.top_k, cfg.tree_size) == ("tree", 3, 2, 6)  # SpecConfig's: no measured shape
    assert "python -m core calibrate" in note and "tree 3/2/6" in note


def test_auto_picks_the_grid_shape_of_highest_predicted_speedup_unless_within_the_margin(pipe, costs, tmp_path,
                                                                                        monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6)
    monkeypatch.setattr(choose, "PAYS", 0.0)  # every shape pays, whatever the tiny model's timings
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="off"))
    data, acc = store.cached(pipe)
    best = max(predict.verdict(data, acc, "nanospec", s).speedup for s in cost.shape_grid())
    default = SpecConfig(method="nanospec", shape="tree", **draft_defaults(pipe.model_id))
    home = predict.verdict(data, acc, "nanospec", predict.shape_of(default)).speedup
    expected = best if best >= home * (1 + choose.MARGIN) else home  # the costs are this machine's timings
    assert cfg.shape in ("tree", "chain") and note.startswith("auto: ")
    assert choose.prediction(pipe, cfg)["predicted_speedup"] == pytest.approx(expected, abs=1e-3)


def test_auto_drafts_from_the_context_alone_where_that_is_predicted_faster(pipe, costs, tmp_path, monkeypatch):
    beside = {"context": 0.0, "context_one": 0.0}  # a model whose drafts almost never pass; 2 ms a token taken in
    synthetic = costs | {"verify": [10.0 + n for n in range(32)], "backbone": [2.0, 4.0, 6.0], "head": {"nanospec": [1.0] * 3},
                         "draft_scale": {}, "other": {"nanospec": 0.0, "ar": 0.0, **beside, "mixed": {"model": 0.0, **beside}}}
    calibrated(pipe, synthetic, tmp_path, monkeypatch, [[0.05, 0.0]] * 6, context={"tau": 3.0, "rows": 4.0,
                                                                                    "drafted": 0.5})
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="on"))
    assert cfg.shape == "context" and "context alone" in note
    off, _ = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="off"))
    assert off.shape in ("tree", "chain")  # with context drafting off, a model draft is the only choice


def test_auto_turns_context_drafting_off_where_the_model_alone_is_predicted_faster(pipe, costs, tmp_path, monkeypatch):
    beside = {"context": 5.0, "context_one": 0.0}  # the context's rows never pay (τ 1) and cost 5 ms a step
    synthetic = costs | {"verify": [10.0] * 32, "backbone": [1.0] * 3, "head": {"nanospec": [0.5] * 3},
                         "draft_scale": {}, "other": {"nanospec": 0.0, "ar": 0.0, **beside, "mixed": {"model": 0.0, **beside}}}
    calibrated(pipe, synthetic, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6, context={"tau": 1.0, "rows": 3.0,
                                                                                             "drafted": 0.5})
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="on"))
    assert cfg.shape in ("tree", "chain") and cfg.context == "off" and "context drafting off" in note
    compared, _ = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="on"),
                                            allow_context=False)
    assert compared.context == "on"  # Compare keeps the user's context setting for every head


def test_auto_leaves_context_drafting_on_where_the_calibration_has_no_context_statistics(pipe, costs, tmp_path,
                                                                                         monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6)  # no "context" entry: not modelled
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="on"))
    assert cfg.context == "on" and "context drafting off" not in note


def test_a_run_on_auto_and_on_the_context_alone_equals_plain_greedy_decoding(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6)
    prompt = "the cat sat on the mat the cat sat on the mat the cat"
    ar = [t for r in pipe.run(prompt, SpecConfig(method="ar", max_new_tokens=24)) for t in r.emitted]
    for shape in ("auto", "context"):
        recs = list(pipe.run(prompt, SpecConfig(method="nanospec", shape=shape, max_new_tokens=24)))
        assert [t for r in recs for t in r.emitted] == ar
    assert all(r.tree["head_calls"] == 0 for r in recs if r.kind == "step")  # the context alone: no model draft


def expensive_rows(costs: dict) -> dict:
    """Costs where each verify row past the first costs 0.6 of a one-row step (a 2-core AVX2-only CPU: ~0.57)."""
    beside = {"context": 2.0, "context_one": 0.5}
    return costs | {"verify": [10.0 + 6.0 * n for n in range(32)], "backbone": [1.0] * 3, "head": {"nanospec": [0.5] * 3},
                    "draft_scale": {}, "other": {"nanospec": 1.0, "ar": 0.0, **beside, "mixed": {"model": 1.0, **beside}}}


def test_auto_decodes_plainly_where_no_choice_is_predicted_to_pay(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, expensive_rows(costs), tmp_path, monkeypatch, [[0.3, 0.1]] * 6,
               context={"tau": 1.5, "rows": 4.0, "drafted": 0.3})
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="on"))
    assert cfg.method == "ar" and note.startswith("auto: plain decoding") and "break-even" in note
    prompt = "the cat sat on the mat the cat sat on the mat the cat"
    recs = list(pipe.run(prompt, SpecConfig(method="nanospec", shape="auto", max_new_tokens=12)))
    ar = list(pipe.run(prompt, SpecConfig(method="ar", max_new_tokens=12)))
    assert [t for r in recs for t in r.emitted] == [t for r in ar for t in r.emitted]
    assert all(r.tree is None or r.tree.get("head_calls", 0) == 0 for r in recs)  # nothing drafted


def test_compare_and_the_paper_runs_keep_a_draft_where_none_is_predicted_to_pay(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, expensive_rows(costs), tmp_path, monkeypatch, [[0.3, 0.1]] * 6)
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="off"),
                                     allow_plain=False)
    assert cfg.method == "nanospec" and cfg.shape in ("tree", "chain") and not note.startswith("auto: plain")


def test_a_new_calibration_changes_autos_kept_choice(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, expensive_rows(costs), tmp_path, monkeypatch, [[0.3, 0.1]] * 6)
    cfg = SpecConfig(method="nanospec", shape="auto", context="off")
    assert choose.resolve_shape(pipe, cfg)[0].method == "ar"
    cheap = expensive_rows(costs) | {"verify": [10.0] * 32, "other": {"nanospec": 0.0, "ar": 0.0}}
    calibrated(pipe, cheap, tmp_path, monkeypatch, [[0.9, 0.6]] * 6)
    assert choose.resolve_shape(pipe, cfg)[0].method == "nanospec"


def test_the_context_alone_needs_context_drafting_on():
    with pytest.raises(SpecError, match="needs context on"):
        SpecConfig(shape="context", context="off").validate()


def test_the_report_holds_this_machines_costs_and_a_verdict_per_head(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6, context={"tau": 1.5, "rows": 3.0,
                                                                                         "drafted": 0.5})
    r = choose.report(pipe, SpecConfig(method="nanospec", context="on"), "a note")
    assert r["costs"]["verify"]["1"] == pytest.approx(costs["verify"][0], abs=0.01) and "8" not in r["costs"]["verify"]
    assert r["run"]["shape"] == "tree 3/2/6 + context" and r["run"]["speedup"] > 0 and r["shape_note"] == "a note"
    assert [v["method"] for v in r["methods"]] == ["nanospec"] and r["context"]["shape"] == "context alone"


def test_a_report_read_at_a_probe_rescales_the_calibrated_costs_to_that_moment(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6)
    t1, t9 = (cost.Costs.at(predict.at_context(costs, 64)["verify"], n) for n in (1, 9))
    slow = {"n_ctx": 64, "target": {"rows": [1, 9], "ms": [2 * t1, 2 * t9]}}
    cached, now = (choose.report(pipe, SpecConfig(method="nanospec"), probe=p) for p in (None, slow))
    assert not cached["anchored"] and now["anchored"]
    assert now["costs"]["verify"]["1"] == pytest.approx(2 * cached["costs"]["verify"]["1"], rel=0.02)


def test_the_report_says_what_to_run_where_nothing_is_calibrated(pipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(store, "ASSETS", tmp_path)
    assert choose.report(pipe, SpecConfig())["missing"] == "python -m core calibrate --acceptance"


def test_with_context_on_a_shape_mixes_the_contexts_steps_with_the_models(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.5, 0.0]] * 6, context={"tau": 2.0, "rows": 4.0, "drafted": 0.5})
    data, acc = store.cached(pipe)
    s = cost.Shape(2, 1, 2)
    alone, mixed = (predict.verdict(data, acc, "nanospec", s, ctx) for ctx in (False, True))
    cs = predict.context_steps(data, acc, mixed=True)  # with the bookkeeping beside the model's tree
    assert (cs.f, cs.tau_c, cs.rows_c) == pytest.approx((0.5, 3.0, 7.0))  # over the steps that found a continuation
    assert min(1.0, cs.tau_c, alone.tau) < mixed.tau < max(cs.tau_c, alone.tau)  # each kind of step at its share
    held = cost.expected_held(cost.Acceptance(acc["heads"]["nanospec"]["a"]), s)
    steady = predict.with_model(predict.costs_of(data, "nanospec"), "nanospec", s, alone.tau, cs, held)
    assert (mixed.tau, mixed.t_step_ms) == pytest.approx(steady)


def test_the_switch_starts_from_the_calibrated_costs_of_its_four_kinds_of_step(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.5, 0.0]] * 6, context={"tau": 2.0, "rows": 4.0, "drafted": 0.5})
    data, acc = store.cached(pipe)
    cfg = SpecConfig(method="nanospec", shape="chain", gamma=2, context="on")
    prior, s = choose.switch_prior(pipe, cfg), cost.Shape(2, 1, 2)
    cs = predict.context_steps(data, acc, mixed=True)
    c = predict.costs_of(data, "nanospec")
    plain, model, ctx, both = predict.mixed_kinds(c, "nanospec", s, 1.75, cs, 0.5)  # held: the first draft's 0.5
    assert prior.ms[0] == pytest.approx((plain[1], model[1])) and prior.ms[1] == pytest.approx((ctx[1], both[1]))
    assert prior.model_tokens == pytest.approx((0.75, both[0] - ctx[0]))  # τ_m = 1 + 0.5 + 0.5 · 0.5
    assert choose.switch_prior(pipe, SpecConfig(method="nanospec", shape="chain", gamma=2, context="off")) is None


def test_a_rarely_drafted_model_pays_the_drafters_catch_up_at_its_steps():
    c = cost.Costs(verify=[10.0 + n for n in range(32)], backbone=[2.0 * w for w in range(1, 9)],
                               head={"nanospec": [1.0] * 8})  # the drafter: 2 ms a token taken in
    cs, s = predict.ContextSteps(f=0.5, tau_c=2.0, rows_c=3.0, t_c=12.0, t_1=10.0), cost.Shape(2, 1, 2)
    every_step, mixed = (f(c, "nanospec", s, 1.1, cs) for f in (predict.step_kinds, predict.mixed_kinds))
    w = cost.shares(*mixed, cs.f)
    assert w[1] + w[3] == pytest.approx(1 / 32)  # 1.1 tokens in 18 ms lose to 1 in 10: explored every 32nd step
    tau = sum(p * k[0] for p, k in zip(w, mixed))
    assert mixed[1][1] - every_step[1][1] == pytest.approx(2.0 * (32 * tau - 1.1))  # 32 steps' tokens, not 1.1


def test_a_run_beside_the_context_starts_from_the_calibrations_switch_and_stays_lossless(pipe, costs, tmp_path,
                                                                                          monkeypatch):
    prompt, n = "the cat sat on the mat", 8
    cfg = SpecConfig(method="nanospec", shape="chain", gamma=2, context="on", max_new_tokens=n)

    def first_step_drafts_the_model() -> tuple:
        recs = list(pipe.run(prompt, cfg, chat=False))
        return recs[1].tree["head_calls"] > 0, [t for r in recs for t in r.emitted]
    ar = [t for r in pipe.run(prompt, SpecConfig(method="ar", max_new_tokens=n), chat=False) for t in r.emitted]
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path / "none"))
    assert first_step_drafts_the_model() == (True, ar)  # no calibration: the switch warms up with the model
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.0, 0.0]] * 6, context={"tau": 2.0, "rows": 4.0, "drafted": 0.5})
    assert first_step_drafts_the_model() == (False, ar)  # calibrated: a model none of whose drafts pass is left out


def test_a_context_steps_one_row_and_continued_steps_cost_their_own_bookkeeping():
    data = {"verify": [10.0, 12.0, 14.0], "backbone": [1.0], "other": {"context": 3.0, "context_one": 1.0}}
    cs = predict.context_steps(data, {"context": {"tau": 2.0, "rows": 2.0, "drafted": 0.5}})
    assert (cs.t_1, cs.t_c, cs.rows_c) == pytest.approx((11.0, 17.0, 3.0))  # 10 + 1; 14 + 3 over 3 rows


def test_auto_keeps_the_default_shape_where_the_grids_best_gains_less_than_the_margin(pipe, costs, tmp_path, monkeypatch):
    calibrated(pipe, costs, tmp_path, monkeypatch, [[0.9, 0.3, 0.1, 0.0]] * 6)
    monkeypatch.setattr(choose, "MARGIN", 1e9)  # no shape gains that much, whatever the tiny model's timings
    monkeypatch.setattr(choose, "PAYS", 0.0)  # and every shape pays
    cfg, note = choose.resolve_shape(pipe, SpecConfig(method="nanospec", shape="auto", context="off"))
    assert (cfg.shape, cfg.depth, cfg.top_k, cfg.tree_size) == ("tree", 3, 2, 6) and "within the cost model's" in note


def test_a_runs_prediction_reads_the_target_curve_at_the_runs_mean_context():
    data = {"verify": [15.0, 16.0], "verify_by_context": {"64": [10.0, 11.0], "512": [20.0, 21.0]}}
    assert predict.at_context(data, 288)["verify"] == pytest.approx([15.0, 16.0])
    assert predict.at_context(data, 64)["verify"] == pytest.approx([10.0, 11.0])
    assert predict.at_context({"verify": [3.0]}, 100) == {"verify": [3.0]}  # one context measured: as it is


def test_the_context_alones_whole_run_pays_no_drafter_prefill():
    data = linear_costs(10.0, 4.0, 2.0, 1.0) | {"other": {"ar": 1.0, store.CONTEXT: 1.0, store.CONTEXT_ONE: 1.0}}
    data["prefill"]["draft"] = [500.0, 500.0]  # a drafter prefill that would swamp a short run
    acc = {"context": {"tau": 1.5, "rows": 3.0, "drafted": 0.5}}
    v = predict.verdict(data, acc, "nanospec", None, run=(40, 8))
    t_pre = cost.interpolate([16, 64], data["prefill"]["target"], 40)
    assert v.run_speedup == pytest.approx(cost.run_speedup(v.t_ar_ms, v.tau, v.t_step_ms, 8, t_pre, 0.0))


def test_the_target_curve_is_read_at_the_nearest_measured_context_outside_them():
    data = {"verify": [9.0, 9.0], "verify_by_context": {"8": [2.0, 3.0], "24": [1.0, 2.0]}}  # noise: falls with context
    assert predict.at_context(data, 64)["verify"] == pytest.approx([1.0, 2.0])  # not extrapolated to 0
    assert predict.at_context(data, 16)["verify"] == pytest.approx([1.5, 2.5])
    assert predict.ratios([0.0, 1.0], {"rows": [1, 2], "ms": [2.0, 3.0]}) == (1.0, 1.0)
