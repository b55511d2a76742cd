"""lowrank_mm (core/kernels/cpu/lowrank_mm.c): a low-rank head's logits over the whole vocabulary on the CPU, on the
shipped SmolLM2 head's trained factors W_up [49152, 72]: every variant this CPU runs, against the fp64 product."""
import pytest
import torch
from safetensors.torch import load_file

from core.kernels.cpu import cpu_layer, isa, lowrank_mm

FACTORS = "assets/heads/smollm2-135m-instruct/slim_r72.safetensors"
RANK = 72


@pytest.fixture(scope="module")
def up() -> torch.Tensor:
    if cpu_layer.lib() is None or not isa.lowrank_variants():
        pytest.skip(f"lowrank_mm does not run here: {cpu_layer.why_not() or 'no AVX2 + FMA'}")
    return load_file(FACTORS)["W_up"][:40_003]  # a vocabulary that is not a multiple of 16 blocks' rows


def z_rows(n: int, r: int = RANK) -> torch.Tensor:
    return torch.randn(n, r, generator=torch.Generator().manual_seed(n))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_lowrank_mm_equals_the_fp64_product_to_fp32_rounding(up, dtype):
    w = up.to(dtype)
    for variant in isa.lowrank_variants():
        packed = lowrank_mm.PackedUp(w, variant)
        assert packed.wide == int(dtype != torch.bfloat16)  # fp16 values are not bf16 ones: kept in fp32
        z = z_rows(5)
        ref = z.double() @ w.double().T
        assert (packed(z).double() - ref).abs().max() <= 1e-5 * ref.abs().max()


def test_every_lowrank_mm_variant_and_the_scalar_loop_give_the_same_floats(up):
    z = z_rows(11)
    outs = [lowrank_mm.PackedUp(up, v)(z) for v in isa.lowrank_variants()]
    scalar = lowrank_mm.PackedUp(up, isa.lowrank_variants()[-1])
    scalar.isa = 0
    outs.append(scalar(z))
    assert all(torch.equal(outs[0], y) for y in outs[1:])


def test_each_row_of_lowrank_mm_is_the_same_whatever_the_row_count(up):
    z = z_rows(13)
    for variant in isa.lowrank_variants():
        packed = lowrank_mm.PackedUp(up, variant)
        whole = packed(z)
        for n in (1, 2, 3, 4, 5, 6, 8, 9):  # every tile: 4 blocks × 1-4 rows (AVX-512), 3 × 1-2 and 1 × 1-6 (AVX2)
            assert torch.equal(packed(z[:n]), whole[:n])
        assert torch.equal(packed(z[7:8]), whole[7:8])


def test_the_isa_cap_picks_the_lowrank_variant_and_none_leaves_it_to_torch(up, monkeypatch):
    monkeypatch.setenv("SPECLENS_CPU_ISA", "avx2")
    assert isa.lowrank_variant() == "avx2" and lowrank_mm.packed(up).isa == isa.LOWRANK["avx2"]
    monkeypatch.setenv("SPECLENS_CPU_ISA", "none")
    assert isa.lowrank_variant() == "" and lowrank_mm.packed(up) is None


def test_a_rank_that_does_not_match_the_factors_is_refused(up):
    with pytest.raises(ValueError, match=f"does not match W_up's rank {RANK}"):
        lowrank_mm.PackedUp(up, isa.lowrank_variants()[0])(torch.zeros(2, 64))


def test_the_product_falls_back_to_torch_when_the_kernels_are_turned_off_after_packing(up, monkeypatch):
    packed, z = lowrank_mm.PackedUp(up, isa.lowrank_variants()[0]), z_rows(3)
    monkeypatch.setenv("SPECLENS_CPU_KERNELS", "0")
    cpu_layer.lib.cache_clear()
    try:
        torch.testing.assert_close(packed(z), z @ up.float().T, rtol=1e-5, atol=1e-5)
    finally:
        monkeypatch.delenv("SPECLENS_CPU_KERNELS")
        cpu_layer.lib.cache_clear()


def test_a_previewing_nanospec_head_finds_the_same_ids_with_lowrank_mm_as_with_torch(up, monkeypatch):
    from core.config import SpecConfig
    from core.decoding.heads import build_head
    down = load_file(FACTORS)["W_down"].bfloat16()
    slim, W = (up.bfloat16(), down), (up.float() @ down.float()).bfloat16()
    cfg = SpecConfig(method="nanospec", w_max=64, preview=64)
    h = torch.randn(3, down.shape[1], generator=torch.Generator().manual_seed(0)).bfloat16()
    picked = []
    for cap in ("amx", "none"):
        monkeypatch.setenv("SPECLENS_CPU_ISA", cap)
        head = build_head("nanospec", W, cfg, slim=slim)
        head.on_prefill(torch.arange(10), head.top_pre(torch.zeros(10, W.shape[0])))
        assert (head.over_v is None) == (cap == "none")
        picked.append(head.score(h)[1])
    assert torch.equal(picked[0], picked[1])


def test_the_preview_bench_times_every_variant_and_topk_beside_torch(up, capsys):
    from bench.suites import preview as bench_preview
    assert bench_preview.main(["--model", "smollm2-135m-instruct", "--rows", "1", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert all(f"lowrank_mm {v:<6} rows  1: here" in out for v in isa.lowrank_variants())
    assert "top-16 of 3 x 49152: cpu_layer.topk" in out
