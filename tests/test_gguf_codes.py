"""A GGUF model's Q4_K / Q6_K codes as the target's weights (core/kernels/cpu/gguf_codes.py, codes_mm.c): they decode to
exactly the bf16 weights the model holds, their products are those weights' products, each row is the same whatever
rows share the call, and a bf16 model on them keeps speculative greedy = its own greedy."""
import numpy as np
import pytest
import torch

from gguf_cases import dequantized, fused, gguf_qwen2, on_codes, random_blocks, spec_and_ar

from core.kernels.cpu import gguf_codes as g
from core.kernels.cpu import isa

needs_codes = pytest.mark.skipif(isa.codes_variant() == "none", reason="no codes_mm variant here (core/kernels/cpu/isa.py)")
def reference_decode(c: g.Codes) -> torch.Tensor:
    """The tile layout read back in numpy, independent of the C kernel: bf16 [n, k]."""
    out = np.empty((c.n, c.k), np.float32)
    tiles = c.k // 32
    for j, kind in enumerate(c.types.tolist()):
        co, so, do = int(c.code_off[j]), int(c.sm_off[j]), int(c.dd_off[j])
        if kind == 0:
            nib = c.codes.numpy()[co:co + 256 * tiles].reshape(tiles, 8, 32)
            q = np.concatenate([nib & 15, nib >> 4], 1).astype(np.float32)          # [tiles, 16 rows, 32]
            sm = c.sm.numpy()[so:so + 32 * tiles].reshape(tiles, 2, 16).astype(np.float32)
            dd = np.repeat(c.dd.numpy()[do:do + 32 * (c.k // 256)].reshape(-1, 2, 16), 8, 0)
            D, M = dd[:, 0] * sm[:, 0], dd[:, 1] * sm[:, 1]                           # [tiles, 16 outputs]
            w = D[:, None, :, None] * q.reshape(tiles, 16, 16, 2) - M[:, None, :, None]
        else:
            q = c.codes.numpy()[co:co + 512 * tiles].view(np.int8).reshape(tiles, 16, 16, 2).astype(np.float32)
            sc = c.sm.numpy()[so:so + 32 * tiles].view(np.int8).reshape(tiles, 2, 16).astype(np.float32)
            d = np.repeat(c.dd.numpy()[do:do + 16 * (c.k // 256)].reshape(-1, 16), 8, 0)
            D = np.repeat(d[:, None] * sc, 8, 1)                                      # [tiles, 16 rows, 16]
            w = D[..., None] * q
        out[16 * j:16 * j + 16] = w.transpose(2, 0, 1, 3).reshape(16, c.k)           # [outputs, tile, row, pair]
    return torch.from_numpy(out).bfloat16()


@pytest.fixture(autouse=True)
def bf16_products(monkeypatch):
    """These specs are about the bf16 codes (SPECLENS_GGUF_MATH=auto picks int8 where only AVX2 runs: test_gguf_q8.py)."""
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "bf16")


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_the_tile_layout_holds_the_dequantized_weights(kind):
    raw = random_blocks(kind, 48, 768)
    assert torch.equal(reference_decode(g.matrix_codes([(kind, raw, 48, 768)])), dequantized(kind, raw, 48, 768))


def test_a_fused_matrix_of_mixed_types_keeps_each_tensors_rows_in_order():
    c, w = fused()
    assert c.types.tolist() == [0] * 4 + [1] * 2 + [0] * 3
    assert torch.equal(reference_decode(c), w)


def test_tensors_the_tiles_cannot_hold_are_refused_by_name():
    with pytest.raises(ValueError, match="Q4_0"):
        g.tensor_codes("Q4_0", np.zeros((16, 18), np.uint8), 16, 32)
    with pytest.raises(ValueError, match=r"\[24, 256\]"):
        g.tensor_codes("Q4_K", random_blocks("Q4_K", 24, 256), 24, 256)


@needs_codes
def test_the_kernel_decodes_the_weights_bit_for_bit():
    c, w = fused()
    assert g.exact(c, w)
    assert not g.exact(c, w.roll(1, 0))


@needs_codes
def test_codes_mm_is_the_product_with_the_decoded_weights():
    c, w = fused()
    x = torch.randn(11, c.k, generator=torch.Generator().manual_seed(0)).bfloat16()
    ref = x.double() @ w.double().T
    y = g.codes_mm(x, c)
    assert y.dtype == torch.bfloat16 and y.shape == (11, c.n)
    assert ((y.double() - ref).abs().max() / ref.abs().max()) < 2 ** -7  # bf16 output rounding, fp32 sums


@needs_codes
def test_each_row_is_the_same_whatever_rows_share_the_call():
    c, _ = fused()
    x = torch.randn(70, c.k, generator=torch.Generator().manual_seed(1)).bfloat16()
    alone = torch.cat([g.codes_mm(x[i:i + 1], c) for i in range(70)])
    for m in (2, 5, 11, 16, 17, 32, 33, 70):
        assert torch.equal(g.codes_mm(x[:m], c), alone[:m]), m


@needs_codes
def test_no_rows_or_a_wrong_input_size_is_refused():
    c, _ = fused()
    for rows, k in ((0, 512), (1, 256)):
        with pytest.raises(ValueError, match=rf"x \[{rows}, {k}\] needs rows of 512 inputs"):
            g.codes_mm(torch.zeros(rows, k), c)


def test_cached_codes_load_back_equal_and_another_layout_is_rebuilt(tmp_path, monkeypatch):
    c, _ = fused()
    g.save_codes({"0.wqkv": c}, tmp_path / "m.codes.safetensors")
    back = g.load_codes(tmp_path / "m.codes.safetensors")["0.wqkv"]
    assert (back.n, back.k) == (c.n, c.k) and all(torch.equal(getattr(back, f), getattr(c, f)) for f in g.FIELDS)
    monkeypatch.setattr(g, "LAYOUT", g.LAYOUT + 1)
    assert g.load_codes(tmp_path / "m.codes.safetensors") is None
    assert g.load_codes(tmp_path / "missing.safetensors") is None


# ---------------------------------------------------------------- a model on its codes

@needs_codes
@pytest.mark.parametrize("method", ["full", "nanospec"])
def test_a_bf16_model_on_its_codes_keeps_speculative_greedy_equal_to_its_own_greedy(tmp_path, method):
    from core.runtime.fast import FastRunner
    from core.trace.stats import compare_to_ar

    target, draft = gguf_qwen2(tmp_path / "tiny.gguf")
    runner = FastRunner(target)
    assert all(on_codes(runner)) and runner.exact_reason == ""
    spec, ar = spec_and_ar(runner, target, draft, method)
    assert compare_to_ar(spec, ar)["identical"]
    assert max(len(r.accepted) for r in spec if r.kind == "step") >= 2


@needs_codes
def test_codes_are_packed_once_and_their_products_agree_with_onednns(tmp_path):
    from core.runtime.config import FastConfig
    from core.runtime.fast import FastRunner
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf")
    ids, pos = torch.tensor([5, 17, 250, 3]), torch.arange(4)
    on, off = FastRunner(target), FastRunner(target, fast_cfg=FastConfig(codes=False))
    assert (tmp_path / "tiny.codes.safetensors").is_file() and not any(on_codes(off))
    assert on.on_codes and not off.on_codes
    a, b = (r.logits(r.forward(ids, pos)[0]) for r in (on, off))
    assert (a - b).abs().max() <= 0.02 * b.abs().max()  # the same bf16 weights, summed in another order


@needs_codes
def test_a_weight_that_differs_from_its_codes_keeps_that_matrix_off_them(tmp_path):
    from core.runtime.fast import FastRunner
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf")
    with torch.no_grad():
        target.model.layers[1].mlp.down_proj.weight[3, 7] += 1.0
    assert on_codes(FastRunner(target)) == [True] + [True] * 4 + [True, True, True, False]


@needs_codes
def test_the_memory_bound_counts_the_codes_bytes_of_a_model_on_them(tmp_path):
    from bench.bandwidth import step_bytes
    from core.runtime.fast import FastRunner
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf")
    runner = FastRunner(target)
    forms = [runner.head_t] + [w[k] for w in runner.layers for k in ("wqkv", "wo", "wgu", "wd")]
    saved = sum(2 * f.codes.n * f.codes.k - f.codes.nbytes for f in forms)
    assert saved > 0 and step_bytes(target, runner) == step_bytes(target) - saved
