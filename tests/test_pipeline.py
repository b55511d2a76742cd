"""Pipeline choices that the engine options select: which SlimSpec factors a head gets."""
import torch

from core.config import SpecConfig
from core.decoding.heads import svd_factors
from core.pipeline import head_dir


def test_slim_init_svd_is_the_truncated_svd_of_the_draft_head(default_pipeline):
    W_up, W_down = default_pipeline.slim_factors(16, "svd")
    ref_up, ref_down = svd_factors(default_pipeline.drafter.head_weight, 16)
    torch.testing.assert_close(W_up @ W_down, ref_up @ ref_down)


def test_slim_init_trained_loads_the_factors_shipped_with_the_eagle_head(default_pipeline):
    from safetensors.torch import load_file
    rank = default_pipeline.drafter.d // 8
    path = head_dir(default_pipeline.model_id) / f"slim_r{rank}.safetensors"
    assert default_pipeline.draft_name == "eagle" and path.exists()
    W_up, _ = default_pipeline.slim_factors(0, "trained")
    torch.testing.assert_close(W_up, load_file(str(path))["W_up"].to(W_up.dtype))


def test_slim_init_is_validated():
    import pytest
    from core.errors import SpecError
    with pytest.raises(SpecError, match="slim_init"):
        SpecConfig(slim_init="random").validate()


def test_inference_dtype_is_bf16_only_where_the_fast_runtime_runs_bf16_products(monkeypatch):
    from core.pipeline import inference_dtype
    monkeypatch.setattr("core.runtime.weights.packed_ok", lambda: True)
    assert inference_dtype("cpu") == torch.bfloat16
    assert inference_dtype("cpu", runtime="eager") == torch.float32
    monkeypatch.setattr("core.runtime.weights.packed_ok", lambda: False)
    assert inference_dtype("cpu") == torch.float32


def pipeline_of(draft_name, model_id="qwen2.5-coder-1.5b-instruct"):
    from types import SimpleNamespace
    from core.pipeline import Pipeline
    target = SimpleNamespace(runtime_name="fast", vocab_size=151936)
    return Pipeline(model_id, None, None, target, drafter=SimpleNamespace(), draft_name=draft_name)


def test_a_draft_model_gets_the_factors_trained_on_its_own_hidden_states():
    from core.pipeline import slim_file
    got = pipeline_of("qwen2.5-coder-0.5b-instruct")._slim_path(112)
    assert got == head_dir("qwen2.5-coder-0.5b-instruct") / slim_file(112, own=True) and got.exists()


def test_the_eagle_and_self_drafters_get_the_targets_factors_of_their_kind():
    from core.pipeline import slim_file
    model = "smollm2-135m-instruct"
    assert pipeline_of("eagle", model)._slim_path(72) == head_dir(model) / slim_file(72, own=False)
    assert pipeline_of("self", model)._slim_path(72) == head_dir(model) / slim_file(72, own=True)
    assert pipeline_of("self", model)._slim_path(8) is None  # no factors at that rank: SVD


def test_an_eagle_head_with_factors_of_its_own_gets_them_before_the_targets_own():
    from core.pipeline import slim_file
    model = "qwen2.5-coder-0.5b-instruct"
    assert pipeline_of("eagle", model)._slim_path(112) == head_dir(model) / slim_file(112, own=False)


def test_an_eagle_head_without_factors_of_its_own_gets_the_targets_own(tmp_path, monkeypatch):
    from core.pipeline import slim_file
    (tmp_path / slim_file(112, own=True)).write_bytes(b"")
    monkeypatch.setattr("core.pipeline.head_dir", lambda model_id: tmp_path)
    assert pipeline_of("eagle", "qwen2.5-coder-0.5b-instruct")._slim_path(112) == tmp_path / slim_file(112, own=True)


def test_an_eagle_heads_layer_on_int8_weights_changes_only_the_drafts(default_pipeline):
    """--draft-weights int8 quantizes the EAGLE layer (the same head, shared); greedy output stays the target's own."""
    from core.trace.stats import compare_to_ar
    quantized = default_pipeline.with_draft_weights("int8")
    assert quantized.draft_name == "eagle" and quantized.drafter.head is default_pipeline.drafter.head
    assert quantized.drafter.runner.fast_cfg.weights == "int8" and "draft weights int8" in quantized.products_note
    prompt, cfg = "Name three rivers in Europe.", SpecConfig(method="nanospec", max_new_tokens=24, context="off")
    ar = list(quantized.run(prompt, SpecConfig(method="ar", max_new_tokens=24)))
    spec = list(quantized.run(prompt, cfg))
    assert compare_to_ar(spec, ar)["identical"]
    assert sum(len(r.accepted) for r in spec if r.kind == "step") > 0


def test_a_drafter_on_the_eager_runtime_keys_its_calibration_apart():
    """Its passes cost several times the fast runtime's: a calibration made on one is never read for the other."""
    from types import SimpleNamespace
    from core.pipeline import draft_note
    assert draft_note(SimpleNamespace(runner=SimpleNamespace(runtime_name="eager"))) == "; draft on the eager runtime"
    fast = SimpleNamespace(runtime_name="fast", fast_cfg=SimpleNamespace(weights="model"))
    assert draft_note(SimpleNamespace(runner=fast)) == ""
    assert draft_note(None) == ""


def test_an_eagle_layer_on_the_eager_runtime_keeps_the_heads_own_weights():
    from core.pipeline import Pipeline
    pipe = Pipeline.load(runtime="eager")
    assert pipe.draft_name == "eagle" and pipe.drafter.runner.runtime_name == "eager"
    assert "draft weights" not in pipe.products_note and "draft on the eager runtime" in pipe.products_note
