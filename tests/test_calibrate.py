"""python -m core calibrate (core/experiments/calibrate.py) on a tiny random pipeline: what it measures, where it
keeps it, and the predictions the CLI and bench print from it."""
from types import SimpleNamespace

import pytest
import torch

from conftest import peaky_tiny
from core.config import SpecConfig
from core.decoding.draft import ModelDrafter
from core.errors import SpecError
from core.experiments import calibrate
from core.experiments.tiny import tiny_tokenizer
from core.pipeline import Pipeline
from core.runtime.fast import make_runner

VOCAB = 300


@pytest.fixture(scope="module")
def pipe() -> Pipeline:
    model, tokenizer = peaky_tiny(0, VOCAB), tiny_tokenizer(VOCAB)
    drafter = ModelDrafter(make_runner(model, tokenizer, "eager"), "self")
    ranks = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))
    return Pipeline("tiny-calibrate", model, tokenizer, make_runner(model, tokenizer, "eager"), drafter, "self", ranks)


@pytest.fixture(scope="module")
def args():
    return SimpleNamespace(rows=6, width=3, contexts="8,24", reps=1, methods=["full", "nanospec"], limit=1,
                           max_new_tokens=6)


@pytest.fixture(scope="module")
def costs(pipe, args, single_thread):
    with torch.no_grad():
        return calibrate.measure_costs(pipe, args, progress=lambda msg: None)


def test_costs_hold_a_target_curve_per_context_and_a_draft_curve_per_head(costs, args):
    assert len(costs["verify"]) == args.rows and set(costs["verify_by_context"]) == {"8", "24"}
    assert len(costs["backbone"]) == args.width and set(costs["head"]) == {"full", "nanospec"}
    assert all(len(v) == args.width for v in costs["head"].values())
    assert all(t > 0 for t in costs["verify"] + costs["backbone"]) and set(costs["other"]) == {"full", "nanospec"}


def test_acceptance_is_a_rate_per_depth_and_rank_for_each_head(pipe, args, single_thread):
    with torch.no_grad():
        acc = calibrate.measure_acceptance(pipe, args, progress=lambda msg: None)
    for m in args.methods:
        a = acc["heads"][m]["a"]
        assert len(a) == calibrate.WIDE["depth"] and all(len(row) == calibrate.WIDE["top_k"] for row in a)
        assert all(0.0 <= x <= 1.0 for row in a for x in row) and acc["heads"][m]["tried"][0][0] > 0
    assert not any(p.startswith("heldout") for p in acc["prompts"])  # calibration never reads the held-out set


def test_a_calibration_belongs_to_one_machine_model_runtime_and_thread_count(pipe, monkeypatch):
    base = calibrate.costs_path(calibrate.calibration_key(pipe))
    monkeypatch.setenv("SPECLENS_CPU_ISA", "avx2")
    assert calibrate.costs_path(calibrate.calibration_key(pipe)) != base
    monkeypatch.delenv("SPECLENS_CPU_ISA")
    old = torch.get_num_threads()
    torch.set_num_threads(old + 1)
    try:
        assert calibrate.costs_path(calibrate.calibration_key(pipe)) != base
    finally:
        torch.set_num_threads(old)
    assert calibrate.costs_path(calibrate.calibration_key(pipe)) == base


def test_the_prediction_says_how_to_calibrate_where_nothing_is_cached(pipe, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(calibrate, "ASSETS", tmp_path)
    p = calibrate.prediction(pipe, SpecConfig(method="nanospec"))
    assert p["predicted_speedup"] is None and "python -m core calibrate --acceptance" in p["prediction_note"]


def test_the_prediction_reads_the_cached_calibration(pipe, costs, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(calibrate, "ASSETS", tmp_path)
    calibrate.write_atomic(calibrate.costs_path(calibrate.calibration_key(pipe)), calibrate.json.dumps(costs))
    acc = {"heads": {"nanospec": {"a": [[0.9, 0.1]] * 6}}}
    calibrate.write_atomic(calibrate.acceptance_path(pipe), calibrate.json.dumps(acc))
    p = calibrate.prediction(pipe, SpecConfig(method="nanospec", shape="chain", gamma=3))
    assert p["predicted_tau"] == pytest.approx(1 + 0.9 + 0.81 + 0.729, abs=1e-3)
    assert p["predicted_speedup"] > 0 and p["break_even_tau"] > 1 and p["prediction_note"] == ""


def test_calibrate_names_a_bad_method_and_a_too_small_grid():
    with pytest.raises(SpecError, match="unknown method"):
        calibrate.parse(["--methods", "nanospec,eagle9"])
    with pytest.raises(SpecError, match="--rows and --width"):
        calibrate.parse(["--rows", "1"])


def test_bench_summary_rows_get_the_prediction_beside_the_measured_speedup(pipe, costs, tmp_path, monkeypatch):
    from core.experiments.bench import add_predictions
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setattr(calibrate, "ASSETS", tmp_path)
    cfgs = {"ar": SpecConfig(method="ar"), "nanospec": SpecConfig(method="nanospec")}
    rows = [{"method": "ar", "predicted_speedup": ""}, {"method": "nanospec", "predicted_speedup": ""}]
    add_predictions(rows, pipe, cfgs)
    assert [r["predicted_speedup"] for r in rows] == ["", ""]  # nothing calibrated yet
    calibrate.write_atomic(calibrate.costs_path(calibrate.calibration_key(pipe)), calibrate.json.dumps(costs))
    calibrate.write_atomic(calibrate.acceptance_path(pipe), calibrate.json.dumps({"heads": {"nanospec": {"a": [[0.5]]}}}))
    add_predictions(rows, pipe, cfgs)
    assert rows[0]["predicted_speedup"] == "" and rows[1]["predicted_speedup"] > 0
