"""Pipeline choices that the engine options select: which SlimSpec factors a head gets."""
import torch

from core.config import SpecConfig
from core.spec.heads import svd_factors
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
    monkeypatch.setattr("core.runtime.fast.packed_ok", lambda: True)
    assert inference_dtype("cpu") == torch.bfloat16
    assert inference_dtype("cpu", runtime="eager") == torch.float32
    monkeypatch.setattr("core.runtime.fast.packed_ok", lambda: False)
    assert inference_dtype("cpu") == torch.float32
