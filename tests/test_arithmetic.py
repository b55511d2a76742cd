"""SPECLENS_GGUF_MATH=auto takes the calibrated GGUF arithmetic where both are recorded (core/cost/choose.py): each
calibration records its arithmetic's predicted speeds, a pipeline loads the faster, an explicit setting wins."""
from types import SimpleNamespace

import pytest
import torch
from gguf_cases import gguf_qwen2, mixed

from core.cost import choose
from core.kernels.cpu import gguf_q8, isa
from core.pipeline import target_config
from core.runtime.config import FastConfig
from core.runtime.weights import codes_math, maths_here

MODEL, DRAFT = "tiny-gguf", "tiny-draft"
both_run = pytest.mark.skipif(maths_here(torch.bfloat16) != ["bf16", "int8"],
                              reason="bf16 codes and int8 blocks do not both run here")


def pipe_on(math: str):
    """A pipeline whose target runs `math` (what choose.record_arithmetic reads of it)."""
    target = SimpleNamespace(on_codes=True, codes_variant={"bf16": "amx-bf16", "int8": "avx2-int8"}[math])
    return SimpleNamespace(target=target, model_id=MODEL, draft_name=DRAFT, model=SimpleNamespace(dtype=torch.bfloat16))


def calibration(step_ms: float) -> dict:
    return {"verify": [step_ms, step_ms * 1.2], "other": {"ar": 0.0}}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "auto")
    return tmp_path


def test_auto_keeps_its_rule_until_both_arithmetics_are_recorded(cache):
    assert choose.chosen_arithmetic(MODEL, DRAFT, "bfloat16", "bf16") == ("", "")
    choose.record_arithmetic(pipe_on("int8"), calibration(50.0), None)
    assert choose.chosen_arithmetic(MODEL, DRAFT, "bfloat16", "bf16") == ("", "")
    choose.record_arithmetic(pipe_on("bf16"), calibration(80.0), None)
    math, note = choose.chosen_arithmetic(MODEL, DRAFT, "bfloat16", "bf16")
    assert math == "int8" and "20.0 tok/s" in note and "12.5 in bf16" in note


def test_auto_keeps_its_rule_where_the_other_is_not_faster_by_more_than_the_margin(cache):
    choose.record_arithmetic(pipe_on("int8"), calibration(78.0), None)  # 12.8 tok/s against 12.5: within 5%
    choose.record_arithmetic(pipe_on("bf16"), calibration(80.0), None)
    assert choose.chosen_arithmetic(MODEL, DRAFT, "bfloat16", "bf16")[0] == "bf16"
    assert choose.chosen_arithmetic(MODEL, DRAFT, "bfloat16", "int8")[0] == "int8"


def test_a_record_is_per_model_pair_and_dtype(cache):
    for math, ms in (("int8", 50.0), ("bf16", 80.0)):
        choose.record_arithmetic(pipe_on(math), calibration(ms), None)
    assert choose.chosen_arithmetic(MODEL, "another-draft", "bfloat16", "bf16") == ("", "")
    assert choose.chosen_arithmetic(MODEL, DRAFT, "float32", "bf16") == ("", "")


def test_nothing_is_recorded_for_a_target_without_gguf_products(cache):
    pipe = pipe_on("int8")
    pipe.target.on_codes = False
    assert choose.record_arithmetic(pipe, calibration(50.0), None) is None


@both_run
def test_a_pipeline_loads_the_faster_recorded_arithmetic_over_autos_rule(cache):
    rule = codes_math(FastConfig(), torch.bfloat16)
    other = "int8" if rule == "bf16" else "bf16"
    choose.record_arithmetic(pipe_on(other), calibration(50.0), None)
    choose.record_arithmetic(pipe_on(rule), calibration(80.0), None)
    fc, note = target_config(MODEL, DRAFT, torch.bfloat16)
    assert codes_math(fc, torch.bfloat16) == other and note.startswith(f"GGUF arithmetic {other} by calibration")


@both_run
def test_an_explicit_arithmetic_is_kept_whatever_was_recorded(cache, monkeypatch):
    choose.record_arithmetic(pipe_on("int8"), calibration(50.0), None)
    choose.record_arithmetic(pipe_on("bf16"), calibration(80.0), None)
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "bf16")
    fc, note = target_config(MODEL, DRAFT, torch.bfloat16)
    assert fc.codes_math == "bf16" and note == ""


@both_run
def test_the_chosen_arithmetic_is_what_the_target_multiplies_in(cache, tmp_path):
    from core.runtime.fast import FastRunner
    rule = codes_math(FastConfig(), torch.bfloat16)
    other = "int8" if rule == "bf16" else "bf16"
    choose.record_arithmetic(pipe_on(other), calibration(50.0), None)
    choose.record_arithmetic(pipe_on(rule), calibration(80.0), None)
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.bfloat16)
    runner = FastRunner(target, None, target_config(MODEL, DRAFT, torch.bfloat16)[0])
    assert choose.pipeline_math(SimpleNamespace(target=runner)) == other
    int8 = all(gguf_q8.is_label(v) for v in runner.codes_variant.split(" + "))
    assert int8 == (other == "int8") or isa.codes_variant() == "none"


def test_a_model_on_an_accelerator_gets_the_default_config_without_asking_the_cpu_kernels(monkeypatch):
    def no_kernels(*a, **k):
        raise AssertionError("the CPU kernels were asked for a model on an accelerator")
    monkeypatch.setattr(isa, "codes_variant", no_kernels)
    monkeypatch.setattr(isa, "codes_variants", no_kernels)
    fc, note = target_config(MODEL, DRAFT, torch.bfloat16, torch.device("cuda", 0))
    assert fc == FastConfig() and note == ""
