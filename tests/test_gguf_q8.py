"""A GGUF model's raw blocks as its products with int8 activations (core/kernels/cpu/gguf_q8.py, q8_mm.c; AVX2,
AVX-VNNI, AVX512-VNNI: every variant this machine runs): for every type the shipped GGUFs hold, the product is the
fp64 product of gguf-py's weights with the int8-rounded inputs, the variants give the same floats, each row is the
same whatever rows and threads share the call, and a model on them keeps speculative greedy = its own greedy."""
import shutil
import subprocess

import numpy as np
import pytest
import torch
from gguf_cases import dequantized, gguf_qwen2, mixed, on_codes, random_blocks, spec_and_ar

from core.kernels.cpu import gguf_q8 as q8
from core.kernels.cpu import isa
from core.kernels.cpu.tuning import set_tuning, tuned, tuning

needs_q8 = pytest.mark.skipif(not q8.available(), reason="no AVX2 q8_mm here (core/kernels/cpu/isa.py)")
KINDS = list(q8.BLOCK)
VARIANTS = [pytest.param(v, marks=pytest.mark.skipif(v not in isa.q8_variants(), reason=f"no {v} q8_mm here"))
            for v in isa.Q8]


def matrix(kind: str, n: int = 48, k: int = 512, seed: int = 0, variant: str = ""):
    raw = random_blocks(kind, n, k, seed, scale=0.01)
    return q8.matrix_raw([(kind, raw, n, k, None)])._replace(variant=variant), dequantized(kind, raw, n, k, torch.float64)


def int8_inputs(x, block: int):
    """x rounded as q8_mm rounds it: per block, rint(x · 127 / max|x|) · max|x| / 127 (fp32 steps), as fp64."""
    xb = x.float().view(x.shape[0], -1, block)
    amax = xb.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, torch.tensor(127.0) / amax.clamp(min=1e-30), torch.zeros(()))
    return ((xb * scale).round().double() * (amax / 127).double()).view_as(x)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_product_is_the_fp64_product_of_the_dequantized_blocks_with_int8_inputs(kind, variant):
    c, w = matrix(kind, variant=variant)
    x = torch.randn(7, c.k, generator=torch.Generator().manual_seed(0))
    ref = int8_inputs(x, 256 if kind in q8.K_TYPES else 32) @ w.T
    y = q8.q8_mm(x, c)
    assert y.dtype == torch.float32 and y.shape == (7, c.n)
    assert (y.double() - ref).abs().max() <= 1e-5 * ref.abs().max()  # fp32 sums of exact integer dot products


@needs_q8
@pytest.mark.parametrize("kind", KINDS)
def test_int8_inputs_stay_within_one_percent_of_the_full_precision_product(kind):
    c, w = matrix(kind)
    x = torch.randn(7, c.k, generator=torch.Generator().manual_seed(1))
    ref = x.double() @ w.T
    assert (q8.q8_mm(x, c).double() - ref).abs().max() <= 0.01 * ref.abs().max()


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_gives_the_avx2_floats_bit_for_bit(variant):
    parts = [(kind, random_blocks(kind, 24, 512, i, scale=0.01), 24, 512, None) for i, kind in enumerate(KINDS)]
    c = q8.matrix_raw(parts)
    x = torch.randn(11, c.k, generator=torch.Generator().manual_seed(5))
    assert torch.equal(q8.q8_mm(x, c._replace(variant=variant)), q8.q8_mm(x, c._replace(variant="avx2")))


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_row_is_the_same_whatever_rows_share_the_call(variant):
    parts = [(kind, random_blocks(kind, 24, 512, i, scale=0.01), 24, 512, None) for i, kind in enumerate(KINDS)]
    c = q8.matrix_raw(parts)._replace(variant=variant)
    x = torch.randn(40, c.k, generator=torch.Generator().manual_seed(2))
    alone = torch.cat([q8.q8_mm(x[i:i + 1], c) for i in range(40)])
    for m in (2, 9, 16, 17, 33, 40):
        assert torch.equal(q8.q8_mm(x[:m], c), alone[:m]), m


@needs_q8
@pytest.mark.parametrize("pair_rows, prefetch, stream", [(1, 2048, 0), (99, 0, 2048), (5, 0, 64), (1, 0, 4096)])
def test_zmm_pairing_and_prefetch_settings_change_no_float(pair_rows, prefetch, stream):
    from core.kernels.cpu import cpu_layer
    parts = [(kind, random_blocks(kind, 40, 512, i, scale=0.01), 40, 512, None) for i, kind in enumerate(KINDS)]
    c = q8.matrix_raw(parts)._replace(variant=isa.q8_variant())
    x = torch.randn(9, c.k, generator=torch.Generator().manual_seed(6))
    lib, reference = cpu_layer.lib(), q8.q8_mm(x, c._replace(variant="avx2"))
    before = lib.q8_pair_rows(), lib.q8_prefetch_bytes(), lib.q8_stream_bytes()
    try:
        lib.q8_set_pair_rows(pair_rows)
        with tuned(prefetch=prefetch, stream=stream):  # the options, handed to the loaded library in this process
            assert (lib.q8_prefetch_bytes(), lib.q8_stream_bytes()) == (prefetch, stream)
            assert all(torch.equal(q8.q8_mm(x[:m], c), reference[:m]) for m in (1, 2, 3, 5, 6, 9))  # 4, 2 and 1 chains
    finally:
        lib.q8_set_pair_rows(before[0])
    assert (lib.q8_pair_rows(), lib.q8_prefetch_bytes(), lib.q8_stream_bytes()) == before


@pytest.mark.parametrize("var", ["prefetch", "stream"])
def test_a_prefetch_setting_that_is_not_a_byte_count_is_refused_by_name(var):
    from core.errors import SpecError
    with pytest.raises(SpecError, match=f"Q8Tuning.{var}='lots'"):
        set_tuning(**{var: "lots"})
    with pytest.raises(SpecError, match=var):
        set_tuning(**{var: -2})
    with tuned(**{var: 0}):
        assert getattr(tuning(), var) == 0
    assert getattr(tuning(), var) == -1


@needs_q8
def test_each_row_is_the_same_at_any_thread_count():
    c, _ = matrix("Q4_K", n=64)
    x = torch.randn(5, c.k, generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = q8.q8_mm(x, c)
        torch.set_num_threads(max(2, threads))
        assert torch.equal(q8.q8_mm(x, c), one)
    finally:
        torch.set_num_threads(threads)


def test_a_fused_matrix_keeps_each_parts_rows_in_the_order_asked():
    a, b = random_blocks("Q5_0", 32, 256, 0), random_blocks("Q6_K", 16, 256, 1)
    order = q8.unpermute(32, 4)
    c = q8.matrix_raw([("Q5_0", a, 32, 256, order), ("Q6_K", b, 16, 256, None)])
    w = torch.cat([dequantized("Q5_0", a, 32, 256, torch.float32)[torch.from_numpy(order)],
                   dequantized("Q6_K", b, 16, 256, torch.float32)])
    assert c.types.tolist() == [6] * 32 + [14] * 16
    assert torch.equal(q8.dequantize_rows(c, range(48)), w)
    assert q8.matches(c, w) and not q8.matches(c, w.roll(1, 0))
    assert q8.matches(c, [w[:32], w[32:]]) and not q8.matches(c, [w[:32], w[33:]])  # the linears, unstacked


def test_unpermute_undoes_the_llama_converters_rope_interleave():
    heads, hd = 2, 8
    rows = torch.arange(heads * hd)
    permuted = rows.view(heads, 2, hd // 2).transpose(1, 2).reshape(-1)  # llama.cpp's convert: per head, halves interleaved
    assert torch.equal(permuted[torch.from_numpy(q8.unpermute(heads * hd, heads))], rows)


def test_blocks_of_another_type_or_shape_are_refused_by_name():
    with pytest.raises(ValueError, match="IQ2_XS is not one of"):
        q8.row_bytes("IQ2_XS", 256)
    with pytest.raises(ValueError, match="rows of 288 inputs are not whole blocks of 256"):
        q8.row_bytes("Q4_K", 288)
    with pytest.raises(ValueError, match=r"Q8_0 \[16, 64\]: 1000 bytes"):
        q8.matrix_raw([("Q8_0", np.zeros(1000, np.uint8), 16, 64, None)])


def test_a_truncated_tensor_keeps_its_matrix_off_the_blocks():
    def truncated():
        raise ValueError("Q4_K [16, 256]: 100 bytes, not 2304")
    assert q8.first_match([truncated], torch.zeros(16, 256)) is None


@needs_q8
def test_no_rows_or_a_wrong_input_size_is_refused():
    c, _ = matrix("Q8_0")
    for rows, k in ((0, 512), (1, 256)):
        with pytest.raises(ValueError, match=rf"x \[{rows}, {k}\] needs rows of 512 inputs"):
            q8.q8_mm(torch.zeros(rows, k), c)


def test_the_none_cap_turns_the_kernel_off(monkeypatch):
    monkeypatch.setenv(isa.ENV, "none")
    assert not q8.available()
    with pytest.raises(RuntimeError, match="no AVX2 kernel"):
        q8.q8_mm(torch.zeros(1, 512), matrix("Q8_0")[0])


# ---------------------------------------------------------------- a model on its blocks

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch, dtype", [("qwen2", torch.float32), ("llama", torch.float32), ("qwen2", torch.bfloat16)])
def test_a_model_on_its_blocks_keeps_speculative_greedy_equal_to_its_own_greedy(tmp_path, monkeypatch, arch, dtype,
                                                                                 variant):
    from core.runtime.fast import FastRunner
    from core.trace.stats import compare_to_ar

    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    monkeypatch.setenv(isa.ENV, variant)
    target, draft = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=dtype, arch=arch)
    runner = FastRunner(target)
    assert all(on_codes(runner)) and runner.exact_reason == "" and runner.codes_variant == isa.Q8[variant][1]
    spec, ar = spec_and_ar(runner, target, draft)
    assert compare_to_ar(spec, ar)["identical"]
    assert max(len(r.accepted) for r in spec if r.kind == "step") >= 2


@needs_q8
def test_int8_logits_agree_with_transformers_within_the_runtimes_check(tmp_path, monkeypatch):
    from core.runtime.fast import gap_tolerance, logits_gap, make_runner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.float32)
    runner = make_runner(target, None, "auto")
    assert runner.runtime_name == "fast" and runner.codes_int8
    assert 1e-4 < logits_gap(target, runner) <= gap_tolerance(torch.float32, int8=True)


@needs_q8
def test_a_weight_that_differs_from_its_blocks_keeps_that_matrix_off_them(tmp_path, monkeypatch):
    from core.runtime.fast import FastRunner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.float32)
    with torch.no_grad():
        target.model.layers[1].mlp.down_proj.weight[0, 7] += 1.0  # a checked row (the first of its part)
    runner = FastRunner(target)
    assert on_codes(runner) == [True] + [True] * 4 + [True, True, True, False]
    assert runner.exact_reason != ""  # one matrix back on a BLAS product
    assert runner.one_call is None  # and the layers back on one call per kernel


@needs_q8
def test_the_runtime_note_names_the_int8_products(tmp_path, monkeypatch):
    from core.pipeline import runtime_note
    from core.runtime.fast import FastRunner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    monkeypatch.setenv(isa.ENV, "avx2")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.float32)
    assert runtime_note(FastRunner(target)) == "fast fp32 on its GGUF codes (avx2-int8), exact"


def test_an_unknown_products_setting_is_refused_by_name(monkeypatch):
    from core.errors import SpecError
    from core.runtime.config import FastConfig
    from core.runtime.weights import codes_math
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "fp8")
    with pytest.raises(SpecError, match="SPECLENS_GGUF_MATH='fp8': use one of auto, bf16, int8"):
        codes_math(FastConfig())


@pytest.mark.parametrize("cap", isa.ORDER)
def test_auto_runs_a_bf16_model_on_its_int8_blocks_wherever_they_run_amx_included(monkeypatch, cap):
    from core.runtime.config import FastConfig
    from core.runtime.weights import codes_math
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "auto")
    monkeypatch.setenv(isa.ENV, cap)
    variant, int8 = isa.codes_variant(), "int8" if q8.available() else ""
    bf16, fp32 = codes_math(FastConfig(), torch.bfloat16), codes_math(FastConfig(), torch.float32)
    expected = {"amx": (int8, ""), "avx512": (int8, ""), "avx2": (int8, int8), "none": ("", "")}[variant]
    assert (bf16, fp32) == expected


def passes_of(runner) -> list:
    """Hidden states and features of a 12-row prefill, then passes of 1, 4 (a tree's mask) and 9 rows."""
    runner.reset()
    out = list(runner.forward(torch.arange(12) + 3, torch.arange(12)))
    runner.commit(torch.arange(12))
    tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    for n, mask in ((1, None), (4, tree), (9, None)):
        at = 12 + len(out)
        out += runner.forward(torch.arange(n) + 40, torch.arange(n) + at, mask)
        runner.commit(torch.tensor([0]))
    return out


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch, dtype", [("qwen2", torch.bfloat16), ("llama", torch.float32)])
def test_all_layers_in_one_call_give_the_per_kernel_floats_bit_for_bit(tmp_path, monkeypatch, arch, dtype, variant):
    from core.runtime.fast import FastRunner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    monkeypatch.setenv(isa.ENV, variant)
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=dtype, arch=arch)
    runner = FastRunner(target)
    if not runner.kernels:
        pytest.skip(f"no fused kernels here: {runner.kernels_reason}")
    assert runner.one_call is not None
    one = passes_of(runner)
    runner.one_call = None
    each = passes_of(runner)
    assert len(one) == len(each) == 8 and all(torch.equal(a, b) for a, b in zip(one, each))


@needs_q8
def test_the_one_call_switch_keeps_the_per_kernel_path(tmp_path, monkeypatch):
    from core.runtime.config import FastConfig
    from core.runtime.fast import FastRunner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.float32)
    assert FastRunner(target, fast_cfg=FastConfig(one_call=False)).one_call is None


@needs_q8
def test_a_draft_model_from_a_gguf_drafts_on_its_own_blocks_in_one_call_and_keeps_greedy_exact(tmp_path, monkeypatch):
    from core.config import SpecConfig
    from core.decoding.engine import generate
    from core.decoding.heads import build_head
    from core.pipeline import draft_config, model_drafter
    from core.runtime.fast import FastRunner
    from core.trace.stats import compare_to_ar
    monkeypatch.delenv("SPECLENS_GGUF_MATH", raising=False)
    target, plain_draft = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed)
    assert draft_config(plain_draft).weights == "int4" and draft_config(target, "int4").weights == "int4"
    assert (draft_config(target).weights, draft_config(target).codes_math) == ("model", "int8")
    drafter = model_drafter(target, None, "tiny", "fast")
    if not drafter.runner.kernels:
        pytest.skip(f"no fused kernels here: {drafter.runner.kernels_reason}")
    assert drafter.runner.one_call is not None and all(on_codes(drafter.runner))
    prompt = torch.randint(0, 304, (40,), generator=torch.Generator().manual_seed(8)).tolist()
    ar = list(generate(FastRunner(target), None, None, prompt, SpecConfig(method="ar", max_new_tokens=40)))
    cfg = SpecConfig(method="nanospec", max_new_tokens=40, w_max=64, shape="tree", depth=4, top_k=2, tree_size=8)
    spec = list(generate(FastRunner(target), drafter, build_head("nanospec", drafter.head_weight, cfg), prompt, cfg))
    assert compare_to_ar(spec, ar)["identical"]


@needs_q8
def test_where_the_prompt_goes_on_the_plain_copy_its_prefill_of_enough_rows_does_and_other_passes_take_the_blocks(
        tmp_path, monkeypatch):
    from core.runtime import weights
    from core.runtime.fast import FastRunner
    monkeypatch.setenv("SPECLENS_GGUF_MATH", "int8")
    target, _ = gguf_qwen2(tmp_path / "tiny.gguf", kinds=mixed, dtype=torch.float32)
    w, n = FastRunner(target).layers[0]["wgu"], weights.PREFILL_ROWS
    assert isinstance(w.codes, q8.RawCodes) and w.plain is not None
    x = torch.randn(n, w.codes.k, generator=torch.Generator().manual_seed(5))
    monkeypatch.setattr(weights, "prefill_on_plain", lambda: True)
    assert torch.equal(weights.mm(x, w, prefill=True), x @ w.plain)
    assert torch.equal(weights.mm(x, w), q8.q8_mm(x, w.codes))
    assert torch.equal(weights.mm(x[:n - 1], w, prefill=True), q8.q8_mm(x[:n - 1], w.codes))
    monkeypatch.setattr(weights, "prefill_on_plain", lambda: False)
    assert torch.equal(weights.mm(x, w, prefill=True), q8.q8_mm(x, w.codes))


@pytest.mark.parametrize("cap", ["avx512", "avx2", "amx"])
def test_the_prompt_goes_on_the_plain_copy_only_where_q8_mm_runs_on_amx_tiles(monkeypatch, cap):
    from core.runtime.weights import prefill_on_plain
    monkeypatch.setenv(isa.ENV, cap)
    assert prefill_on_plain() == (isa.q8_variant() == "amx")
    assert cap == "amx" or not prefill_on_plain()


def test_whole_groups_of_eight_outputs_are_interleaved_and_the_rest_kept_as_they_are():
    parts = [("Q4_1", random_blocks("Q4_1", 20, 256, 1), 20, 256, None), ("Q6_K", random_blocks("Q6_K", 8, 256, 2), 8, 256, None),
             ("Q8_0", random_blocks("Q8_0", 16, 256, 3), 16, 256, None)]
    c = q8.matrix_raw(parts)
    # Q4_1 rows 0..15 in two groups (16..19 a partial group); Q6_K rows 20..27 and Q8_0 rows 28..43 start off the
    # grid of 8: none of theirs
    assert (c.x8_off >= 0).tolist() == [True, True, False, False, False, False]
    assert c.x8.numel() == 2 * (256 // 32) * q8.X8_KINDS["Q4_1"]


@needs_q8
@pytest.mark.parametrize("kind", list(q8.X8_KINDS))
def test_interleaved_groups_give_the_fp64_product_and_the_same_rows_whatever_rows_share_the_call(kind, monkeypatch):
    c, w = matrix(kind, n=40)
    assert c.x8 is not None and (c.x8_off >= 0).all()
    assert c.x8.numel() == 40 * c.k // 32 * q8.X8_KINDS[kind] // q8.X8
    x = torch.randn(13, c.k, generator=torch.Generator().manual_seed(4))
    ref = int8_inputs(x, 256 if kind in q8.K_TYPES else 32) @ w.T
    y = q8.q8_mm(x, c)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
    alone = torch.cat([q8.q8_mm(x[i:i + 1], c) for i in range(13)])
    assert torch.equal(y, alone)
    with tuned(interleave=False):
        flat, _ = matrix(kind, n=40)
    assert flat.x8 is None and torch.allclose(q8.q8_mm(x, flat), y, rtol=1e-5, atol=1e-5 * y.abs().max().item())


def test_a_product_reads_the_interleaved_groups_instead_of_their_rows():
    parts = [("Q4_1", random_blocks("Q4_1", 20, 256, 1), 20, 256, None), ("Q6_K", random_blocks("Q6_K", 8, 256, 2), 8, 256, None)]
    c = q8.matrix_raw(parts)
    # 16 Q4_1 rows interleaved (8 blocks of 20 bytes each, the same bytes as x8), 4 Q4_1 and 8 Q6_K rows as they are
    assert c.read_bytes == c.x8.numel() + 4 * 8 * 20 + 8 * 210 and c.x8.numel() == 16 * 8 * 20


@needs_q8
def test_a_matrix_interleaved_whole_drops_its_raw_blocks_and_keeps_its_products():
    c, _ = matrix("Q4_K", n=32)
    slim = q8.slim(c)
    assert slim.raw.numel() == 0 and slim.read_bytes == c.x8.numel()
    x = torch.randn(5, c.k, generator=torch.Generator().manual_seed(7))
    assert torch.equal(q8.q8_mm(x, slim), q8.q8_mm(x, c))
    partial, _ = matrix("Q4_K", n=36)  # a last group of 4 stays on its raw blocks
    assert q8.slim(partial).raw.numel() == partial.raw.numel()


@needs_q8
@pytest.mark.skipif(not shutil.which("objdump"), reason="no objdump here")
def test_the_interleaved_dot_products_keep_their_stream_prefetch():
    """gcc 12 dropped an _mm_prefetch inlined into the target functions: every variant's interleaved dot products
    must still hold prefetch instructions in the built library."""
    from core.kernels.cpu import build
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(build.library())], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    counts = {}
    for name in ("dot8_avx2", "dot8_avx512", "dot16_avx512"):
        body = out[out.index(f"<{name}>:\n"):]
        counts[name] = body[:body.index("\n\n")].count("prefetch")
    assert all(n > 0 for n in counts.values()), counts


def test_a_drafts_weights_quantize_to_the_q8_0_blocks_gguf_writes():
    """q8_0_codes (a draft's int8 weights for q8_mm) writes llama.cpp's Q8_0 blocks, byte for byte as gguf-py does."""
    from gguf import GGMLQuantizationType, quantize
    w = torch.randn(20, 128, generator=torch.Generator().manual_seed(3))  # 20 rows: not all interleaved, raw kept
    w[3, :32] = 0  # an all-zero block: d = 0, codes 0
    c = q8.q8_0_codes(w)
    assert (c.n, c.k) == (20, 128) and set(c.types.tolist()) == {q8.TYPES["Q8_0"]}
    want = quantize(w.numpy(), GGMLQuantizationType.Q8_0).reshape(-1)
    assert np.array_equal(c.raw.numpy(), want)


@needs_q8
def test_int8_draft_weights_multiply_on_q8_mm_for_any_number_of_rows():
    from core.runtime.quant import quantize
    from core.runtime.weights import Forms, mm
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(4)).bfloat16()
    quant = quantize(w, "int8")
    assert quant[:2] == ("int8", "q8")
    x = torch.randn(40, 256, generator=torch.Generator().manual_seed(5))
    got = mm(x, Forms(quant=quant))
    assert torch.equal(got, q8.q8_mm(x, quant[2])) and torch.equal(got[:1], mm(x[:1], Forms(quant=quant)))
