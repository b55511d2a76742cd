"""Every codes_mm variant this CPU runs (core/kernels/cpu/isa.py: amx, avx512, avx2; SPECLENS_CPU_ISA caps the choice):
each decodes a GGUF's codes to gguf-py's weights bit for bit, multiplies by them, keeps each row the same whatever
rows share the call, and a bf16 model on them keeps speculative greedy = its own greedy."""
import pytest
import torch
from gguf_cases import fused, gguf_qwen2, on_codes, spec_and_ar

from core.errors import SpecError
from core.kernels.cpu import gguf_codes as g
from core.kernels.cpu import isa

VARIANTS = [pytest.param(v, marks=pytest.mark.skipif(v not in isa.codes_variants(), reason=f"no {v} codes_mm here"))
            for v in ("amx", "avx512", "avx2")]


@pytest.fixture(autouse=True)
def bf16_products(monkeypatch):
    """These specs are about the bf16 codes (SPECLENS_GGUF_MATH=auto picks int8 where only AVX2 runs: test_gguf_q8.py)."""
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "bf16")


@pytest.fixture(scope="module")
def matrix():
    """A fused Q4_K | Q6_K | Q4_K matrix of 512 inputs (two chunks of 8 tiles): (codes, gguf-py's bf16 weights)."""
    return fused()


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_decodes_the_dequantized_weights_bit_for_bit(matrix, variant):
    c, w = matrix
    assert g.exact(c._replace(variant=variant), w)
    assert not g.exact(c._replace(variant=variant), w.roll(1, 0))


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variants_product_is_the_fp64_product_of_the_weights(matrix, variant):
    c, w = matrix
    x = torch.randn(11, c.k, generator=torch.Generator().manual_seed(0)).bfloat16()
    ref = x.double() @ w.double().T
    y = g.codes_mm(x, c._replace(variant=variant))
    assert y.dtype == torch.bfloat16 and y.shape == (11, c.n)
    err = (y.double() - ref).abs()
    assert (err <= 2 ** -8 * ref.abs() + 1e-4 * ref.abs().max()).all()  # bf16 output rounding + fp32 sums


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_row_is_the_same_whatever_rows_share_the_call(matrix, variant):
    c = matrix[0]._replace(variant=variant)
    x = torch.randn(70, c.k, generator=torch.Generator().manual_seed(1)).bfloat16()
    alone = torch.cat([g.codes_mm(x[i:i + 1], c) for i in range(70)])
    for m in (2, 3, 4, 5, 8, 9, 11, 16, 17, 33, 70):
        assert torch.equal(g.codes_mm(x[:m], c), alone[:m]), m


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_rows_or_a_wrong_input_size_is_refused(matrix, variant):
    c = matrix[0]._replace(variant=variant)
    for rows, k in ((0, 512), (1, 256)):
        with pytest.raises(ValueError, match=rf"x \[{rows}, {k}\] needs rows of 512 inputs"):
            g.codes_mm(torch.zeros(rows, k), c)


def test_a_variant_this_cpu_lacks_is_refused_by_name(matrix):
    missing = [v for v in ("amx", "avx512", "avx2") if v not in isa.codes_variants()] + ["none"]
    with pytest.raises(RuntimeError, match=f"no {missing[0]} kernel here"):
        g.codes_mm(torch.zeros(1, 512), matrix[0]._replace(variant=missing[0]))


def test_the_cap_picks_the_best_variant_at_or_below_it(monkeypatch):
    here = isa.codes_variants()
    monkeypatch.delenv(isa.ENV, raising=False)
    monkeypatch.delenv("SPECLENS_MARCH", raising=False)  # its level implies a cap too
    assert isa.codes_variant() == here[0]
    for cap in isa.ORDER:
        monkeypatch.setenv(isa.ENV, cap.upper())
        assert isa.codes_variant() == next(v for v in here if isa.ORDER.index(v) >= isa.ORDER.index(cap))
    assert isa.codes_variant() == "none" and not isa.int4_vnni() and isa.q8_variant() == ""


def test_the_cap_picks_the_best_int8_variant_at_or_below_it(monkeypatch):
    here = isa.q8_variants()
    for cap in isa.ORDER:
        monkeypatch.setenv(isa.ENV, cap)
        allowed = [v for v in here if isa.ORDER.index(v) >= isa.ORDER.index(cap)]
        assert isa.q8_variant() == (allowed[0] if allowed else "")


def test_an_unknown_cap_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(isa.ENV, "sse9")
    with pytest.raises(SpecError, match=r"SPECLENS_CPU_ISA='sse9': use one of amx, avx512, avxvnni, avx2, none"):
        isa.codes_variant()


# ---------------------------------------------------------------- a model on its codes, per variant

@pytest.mark.parametrize("variant", VARIANTS)
def test_a_model_on_each_variant_keeps_speculative_greedy_equal_to_its_own_greedy(tmp_path, monkeypatch, variant):
    from core.runtime.fast import FastRunner
    from core.trace.stats import compare_to_ar

    monkeypatch.setenv(isa.ENV, variant)
    target, draft = gguf_qwen2(tmp_path / "tiny.gguf")
    runner = FastRunner(target)
    assert all(on_codes(runner)) and runner.exact_reason == ""
    spec, ar = spec_and_ar(runner, target, draft)
    assert compare_to_ar(spec, ar)["identical"]
    assert max(len(r.accepted) for r in spec if r.kind == "step") >= 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_runtime_note_names_the_variant_that_runs(tmp_path, monkeypatch, variant):
    from core.pipeline import runtime_note
    from core.runtime.fast import FastRunner
    monkeypatch.setenv(isa.ENV, variant)
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf")
    assert runtime_note(FastRunner(target)) == f"fast bf16 on its GGUF codes ({isa.LABELS[variant]}), exact"


def test_the_none_cap_keeps_the_model_off_its_codes(tmp_path, monkeypatch):
    from core.runtime.fast import FastRunner
    monkeypatch.setenv(isa.ENV, "none")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf")
    runner = FastRunner(target)
    assert not any(on_codes(runner)) and not runner.on_codes and runner.codes_variant == ""
