"""python -m core calibrate (core/cost/measure.py, its timed passes and probe: core/cost/probe.py) on a tiny random
pipeline: what it measures and how it times it, and the app's background calibration (ui/cost_measure.py). What a
calibration predicts and chooses: tests/test_cost_choose.py."""
import json
import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from core.cost import measure, store
from core.cost.probe import PROBE, anchor_probe, ms_rounds, probe
from core.errors import SpecError
from core.paths import write_atomic
from cost_cases import measured_costs, quick_args, tiny_pipe  # noqa: F401  (the fixtures costs, args, pipe)


def test_costs_hold_a_target_curve_per_context_and_a_draft_curve_per_head(costs, args):
    assert len(costs["verify"]) == args.rows and set(costs["verify_by_context"]) == {"8", "24"}
    assert len(costs["backbone"]) == args.width and set(costs["head"]) == {"full", "nanospec"}
    assert all(len(v) == args.width for v in costs["head"].values())
    assert all(t > 0 for t in costs["verify"] + costs["backbone"])
    assert set(costs["other"]) == {"full", "nanospec", "context", "context_one", "ar", "mixed"}  # context alone's, AR's
    assert set(costs["other"]["mixed"]) == {"model", "context", "context_one"}  # beside the context, with the model, without
    assert set(costs["draft_scale"]) == {"full", "nanospec"} and all(v > 0 for v in costs["draft_scale"].values())


def test_a_calibration_at_one_context_length_measures_every_cost(pipe, args, single_thread):
    with torch.no_grad():
        one = measure.measure_costs(pipe, SimpleNamespace(**(vars(args) | {"contexts": "8", "methods": ["nanospec"]})),
                                      progress=lambda msg: None)
    assert set(one["verify_by_context"]) == {"8"} and set(one["other"]) == {"nanospec", "context", "context_one", "ar",
                                                                             "mixed"}


def test_the_verify_curve_times_each_row_count_to_17_then_every_4th_and_is_linear_between(pipe, monkeypatch,
                                                                                          single_thread):
    assert measure.curve_rows(32) == list(range(1, 18)) + [20, 24, 28, 32]
    timed, forward = [], pipe.target.forward
    monkeypatch.setattr(pipe.target, "forward", lambda ids, *a, **k: (timed.append(len(ids)), forward(ids, *a, **k))[1])
    with torch.no_grad():
        curve = measure.verify_curve(pipe, 32, 26, 1, list(range(3, 40)))
    assert set(timed) - {32} == set(measure.curve_rows(26)) and 18 not in timed and len(curve) == 26
    assert curve[21] == pytest.approx(curve[19] + (curve[23] - curve[19]) / 2)  # t(22) halfway between t(20), t(24)
    assert curve[25] > 0


def test_costs_hold_the_prefills_of_the_target_and_the_drafter_per_prompt_length(costs):
    pre = costs["prefill"]
    assert pre["rows"] == list(measure.PREFILL_AT) and len(pre["target"]) == len(pre["draft"]) == len(pre["rows"])
    assert all(t > 0 for t in pre["target"] + pre["draft"])


def test_acceptance_is_a_rate_per_depth_and_rank_for_each_head(pipe, args, single_thread):
    with torch.no_grad():
        acc = measure.measure_acceptance(pipe, args, progress=lambda msg: None)
    for m in args.methods:
        a = acc["heads"][m]["a"]
        assert len(a) == measure.WIDE["depth"] and all(len(row) == measure.WIDE["top_k"] for row in a)
        assert all(0.0 <= x <= 1.0 for row in a for x in row) and acc["heads"][m]["tried"][0][0] > 0
    assert not any(p.startswith("heldout") for p in acc["prompts"])  # calibration never reads the held-out set
    ctx = acc["context"]
    assert ctx["steps"] > 0 and ctx["tau"] >= 1.0 and ctx["rows"] >= 1.0 and 0.0 <= ctx["drafted"] <= 1.0


def test_a_probe_times_the_target_and_the_drafter_now_at_one_row_and_a_wide_pass(pipe, single_thread):
    with torch.no_grad():
        got = probe(pipe, reps=1)
    assert got["target"]["rows"] == [1, PROBE["rows"]] and got["draft"]["rows"] == [1, PROBE["width"]]
    assert all(t > 0 for t in got["target"]["ms"] + got["draft"]["ms"]) and got["n_ctx"] == PROBE["n_ctx"]


def test_calibrate_names_a_bad_method_and_a_too_small_grid():
    with pytest.raises(SpecError, match="unknown method"):
        measure.parse(["--methods", "nanospec,eagle9"])
    with pytest.raises(SpecError, match="--rows and --width"):
        measure.parse(["--rows", "1"])


def test_a_bench_anchors_its_predictions_to_a_probe_where_the_machine_is_calibrated(pipe, costs, tmp_path, monkeypatch,
                                                                                   single_thread):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    assert anchor_probe(pipe) is None  # nothing calibrated: nothing to anchor
    write_atomic(store.costs_path(store.calibration_key(pipe)), json.dumps(costs))
    got = anchor_probe(pipe)
    assert got["target"]["rows"] == [1, PROBE["rows"]] and got["draft"]["ms"][0] > 0


def test_a_long_lived_process_reuses_a_pipelines_probe_while_it_is_young(pipe, costs, tmp_path, monkeypatch,
                                                                          single_thread):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    write_atomic(store.costs_path(store.calibration_key(pipe)), json.dumps(costs))
    first = anchor_probe(pipe, max_age_s=600)
    assert anchor_probe(pipe, max_age_s=600) is first
    assert anchor_probe(pipe) is not first  # no age allowed: probed again


def test_a_context_runs_steps_are_timed_by_kind_one_row_and_continued(pipe, single_thread):
    prompt = "the cat sat on the mat the cat sat on the mat the cat"  # repeats: the context finds continuations
    with torch.no_grad():
        got = measure.engine_steps(pipe, "nanospec", [prompt, prompt], 12, shape="context", context="on")
    assert got["model"] is None and got["continued"] is not None and got["continued"] > 0
    assert measure.engine_steps(pipe, "ar", prompt, 4)["one"] > 0


def test_a_steps_bookkeeping_is_its_wall_time_less_its_draft_and_its_own_target_pass():
    steps = [(10.0, 0.0, 1, 5, 1, False, 9.0), (14.0, 0.0, 1, 6, 1, False, 12.0),  # a slower phase in the second
             (30.0, 12.0, 5, 7, 2, True, 15.0), (20.0, 0.0, 3, 9, 3, False, 17.5)]
    got = measure.step_rest(steps)
    assert got["one"] == pytest.approx(1.5) and got["model"] == pytest.approx(3.0) and got["continued"] == pytest.approx(2.5)
    assert measure.step_rest([])["one"] is None


def test_plain_decodings_bookkeeping_is_measured_from_engine_runs(pipe, single_thread):
    with torch.no_grad():
        steps = measure.record_steps(pipe, "ar", "the cat sat on the mat", 6)
    assert len(steps) == 5 and all(own > 0 for *_, own in steps)  # the prefill's token, then 5 plain steps
    assert 0 < measure.step_rest(steps)["one"] < statistics.mean(wall for wall, *_ in steps)


def test_the_continued_and_one_row_costs_fall_back_to_each_other_where_a_run_lacked_one():
    assert measure.beside_context({"one": 0.5, "continued": 2.0}) == {"context": 2.0, "context_one": 0.5}
    assert measure.beside_context({"one": None, "continued": 2.0}) == {"context": 2.0, "context_one": 2.0}
    assert measure.beside_context({"one": 0.5, "continued": None}, {"context": 1.5}) == {"context": 1.5,
                                                                                          "context_one": 0.5}


def test_the_apps_background_calibration_measures_once_and_caches(pipe, args, tmp_path, monkeypatch, single_thread):
    from ui import cost_measure
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(measure, "defaults", lambda: args)
    monkeypatch.setattr(cost_measure, "_STATE", {})
    monkeypatch.setenv("SPECLENS_CALIBRATE", "0")
    assert not cost_measure.start("tiny", pipe)  # switched off
    monkeypatch.setenv("SPECLENS_CALIBRATE", "1")
    assert cost_measure.start("tiny", pipe) and not cost_measure.start("tiny", pipe)  # one at a time
    deadline = time.monotonic() + 120
    while cost_measure.status("tiny")["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cost_measure.status("tiny")["state"] == "done"
    assert store.cached(pipe)[0]["verify"] and not cost_measure.start("tiny", pipe)  # cached now


def test_each_point_of_a_curve_is_timed_after_itself_in_every_round():
    calls = []
    times = ms_rounds([lambda i=i: calls.append(i) for i in range(3)], reps=2, rounds=2)
    # per round and point: a warm-up call, then 2 timed ones in a row
    assert calls == ([0] * 3 + [1] * 3 + [2] * 3) * 2 and len(times) == 3


def test_the_engine_runs_are_timed_before_the_cost_curves(pipe, args, monkeypatch, single_thread):
    order = []
    for name in ("record_steps", "verify_curve", "draft_curves", "prefill_curves"):
        fn = getattr(measure, name)
        monkeypatch.setattr(measure, name, lambda *a, fn=fn, name=name, **k: (order.append(name), fn(*a, **k))[1])
    with torch.no_grad():
        measure.measure_costs(pipe, args, progress=lambda msg: None)
    first_curve = min(order.index(n) for n in ("verify_curve", "draft_curves", "prefill_curves"))
    assert "record_steps" in order and "record_steps" not in order[first_curve:]


