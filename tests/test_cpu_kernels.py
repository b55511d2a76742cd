"""The fused CPU kernels (core/kernels/cpu/layer_ops.c, int4_mm.c) against their torch reference, the fast runtime's torch path."""
import pytest
import torch
import torch.nn.functional as F

from core.runtime import fast as rt
from core.runtime.config import Arch
from core.runtime.quant import int4_codes, quantize
from core.kernels.cpu import cpu_layer

pytestmark = pytest.mark.skipif(cpu_layer.lib() is None, reason=f"fused CPU kernels unavailable: {cpu_layer.why_not()}")
TOL = dict(atol=2e-6, rtol=2e-6)


def arch(qk_norm=False, H=4, K=2, hd=16) -> Arch:
    return Arch(1, H * hd, H, K, hd, 32, 1e-6, hd ** -0.5, False, qk_norm, False, 1.0, 0.0, None, 0)


def tree_bias(parents, C: int) -> torch.Tensor:
    """[n, C + n] additive mask: all C cache rows, then each node's ancestors and itself."""
    n = len(parents)
    m = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            m[i] |= m[p]
    return rt.tree_bias(m, n, C, 0, torch.float32)


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_cast_matches_rms_norm(dtype):
    x, w = rand(5, 72), rand(72, seed=1)
    torch.testing.assert_close(cpu_layer.rms_cast(x, w, 1e-6, dtype), rt.rms(x, w, 1e-6).to(dtype), **TOL)


def test_add_rms_adds_the_normed_output_then_normalises():
    x, o, ws, w = rand(3, 40), rand(3, 40, seed=1).bfloat16(), rand(40, seed=2), rand(40, seed=3)
    want_x = x + rt.rms(o.float(), ws, 1e-6)
    h = cpu_layer.add_rms(x, o, ws, w, 1e-6, torch.float32)
    torch.testing.assert_close(x, want_x, **TOL)
    torch.testing.assert_close(h, rt.rms(want_x, w, 1e-6), **TOL)


@pytest.mark.parametrize("act,ref", [("silu", F.silu), ("gelu_pytorch_tanh", lambda g: F.gelu(g, approximate="tanh"))])
def test_act_mul_matches_torch(act, ref):
    gu = rand(4, 2 * 50) * 6
    got = cpu_layer.act_mul(gu, cpu_layer.ACTS[act], torch.float32)
    torch.testing.assert_close(got, ref(gu[:, :50]) * gu[:, 50:], **TOL)


def torch_attend(qkv, qn, kn, cos, sin, kt, v, start, bias, a):
    """The runtime's torch path for the same step (q/k norms, rope, cache write, attention)."""
    n, H, K = qkv.shape[0], a.n_heads, a.n_kv
    x = qkv.float().view(n, H + 2 * K, a.hd)
    q, k, vv = x[:, :H], x[:, H:H + K], x[:, H + K:]
    if qn is not None:
        q, k = rt.rms(q, qn, a.eps), rt.rms(k, kn, a.eps)
    q, k = rt.rope(q, cos.unsqueeze(1), sin.unsqueeze(1)), rt.rope(k, cos.unsqueeze(1), sin.unsqueeze(1))
    kt[:, :, start:start + n], v[:, start:start + n] = k.permute(1, 2, 0), vv.transpose(0, 1)
    return rt.attention(q, kt, v, bias.repeat(H // K, 1), a, start + n)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_attend_matches_torch_attention_under_a_tree_mask(qk_norm):
    a, C, parents = arch(qk_norm), 9, [-1, 0, 0, 2, 1]
    n, width = len(parents), (a.n_heads + 2 * a.n_kv) * a.hd
    qkv, cos, sin = rand(n, width), rand(n, a.hd, seed=1), rand(n, a.hd, seed=2)
    qn, kn = (rand(a.hd, seed=3), rand(a.hd, seed=4)) if qk_norm else (None, None)
    kt, v = rand(a.n_kv, a.hd, 32, seed=5), rand(a.n_kv, 32, a.hd, seed=6)
    kt2, v2 = kt.clone(), v.clone()
    bias = tree_bias(parents, C)
    got = cpu_layer.attend(qkv, None, qn, kn, a.eps, cos, sin, kt, v, C, bias, a, torch.float32)
    want = torch_attend(qkv, qn, kn, cos, sin, kt2, v2, C, bias, a)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(kt, kt2, **TOL)
    torch.testing.assert_close(v, v2, **TOL)


def test_attend_rows_do_not_depend_on_masked_gaps_or_the_pass_size():
    """A tree node's output equals, bit for bit, decoding its path one token at a time into a compacted cache:
    what makes tree verification lossless at any precision."""
    a, C, parents = arch(), 23, [-1, 0, 0, 1, 2, 4, 4, 6]  # node 7's path: rows 0, 2, 4, 6, 7
    n, width = len(parents), (a.n_heads + 2 * a.n_kv) * a.hd
    qkv, cos, sin = rand(n, width).bfloat16(), rand(n, a.hd, seed=1), rand(n, a.hd, seed=2)
    kt, v = rand(a.n_kv, a.hd, 64, seed=5), rand(a.n_kv, 64, a.hd, seed=6)
    tree = cpu_layer.attend(qkv, None, None, None, a.eps, cos, sin, kt.clone(), v.clone(), C,
                            tree_bias(parents, C), a, torch.bfloat16)
    steps = []
    for k, j in enumerate([0, 2, 4, 6, 7]):
        steps.append(cpu_layer.attend(qkv[j:j + 1], None, None, None, a.eps, cos[j:j + 1], sin[j:j + 1], kt, v,
                                      C + k, torch.zeros(1, C + k + 1), a, torch.bfloat16))
    assert torch.equal(tree[[0, 2, 4, 6, 7]], torch.cat(steps))


def test_attend_over_a_long_cache_gives_the_same_floats_on_one_thread_or_two_and_matches_torch():
    """Long enough that the kv heads go to the threads (ATT_SPLIT): each head's operations are the same on any
    thread, so the tree's rows and the 1-token passes stay equal bit for bit."""
    a, C, parents = arch(H=6, K=3, hd=64), 700, [-1, 0, 0, 1, 2, 4, 4, 6, 3]
    n, width = len(parents), (a.n_heads + 2 * a.n_kv) * a.hd
    qkv, cos, sin = rand(n, width), rand(n, a.hd, seed=1), rand(n, a.hd, seed=2)
    kt, v, bias = rand(a.n_kv, a.hd, 768, seed=5), rand(a.n_kv, 768, a.hd, seed=6), tree_bias(parents, C)
    threads, out = torch.get_num_threads(), {}
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            out[t] = cpu_layer.attend(qkv, None, None, None, a.eps, cos, sin, kt.clone(), v.clone(), C, bias, a,
                                      torch.float32)
        steps = [cpu_layer.attend(qkv[j:j + 1], None, None, None, a.eps, cos[j:j + 1], sin[j:j + 1], kt, v, C + k,
                                  torch.zeros(1, C + k + 1), a, torch.float32) for k, j in enumerate([0, 2, 4, 6, 7])]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out[1], out[2]) and torch.equal(out[2][[0, 2, 4, 6, 7]], torch.cat(steps))
    kt2, v2 = rand(a.n_kv, a.hd, 768, seed=5), rand(a.n_kv, 768, a.hd, seed=6)
    torch.testing.assert_close(out[2], torch_attend(qkv, None, None, cos, sin, kt2, v2, C, bias, a), **TOL)


@pytest.mark.parametrize("V", [2, 15, 16, 49152, 49157])
def test_top2_gives_torchs_argmax_and_top_two_values_ties_and_tails_included(V):
    x = rand(6, V)
    x[1, :] = 0.5  # every value tied: argmax is the first
    x[2, V - 1] = x[2].max() + 1  # the maximum in the tail past the last full lane block
    x[3, V // 3], x[3, V - 1] = 9.0, 9.0  # the maximum twice: top-2 holds it twice, argmax the first
    x[4, :] = -1e30
    x[4, V // 2] = float("inf")
    x[5] = rand(V, seed=1).bfloat16().float()  # bf16-rounded logits: many exact repeats
    idx, top = cpu_layer.top2(x)
    assert torch.equal(idx, x.argmax(-1)) and torch.equal(top, x.topk(2, dim=-1).values)


@pytest.mark.parametrize("bad", [float("nan"), "all -inf"])
def test_top2_leaves_a_row_with_a_nan_or_nothing_above_minus_infinity_to_torch(bad):
    x = rand(2, 100)
    if bad == "all -inf":
        x[1] = float("-inf")
    else:
        x[1, 7] = bad
    assert cpu_layer.top2(x) is None
    runner = rt.FastRunner.__new__(rt.FastRunner)
    runner.kernels = True
    best, top = runner.top2(x)
    assert best == x.argmax(-1).tolist()
    torch.testing.assert_close(top, x.topk(2, dim=-1).values, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("V, k", [(16, 16), (49157, 16), (151936, 64), (1000, 256)])
def test_topk_gives_torchs_values_and_the_lowest_indices_among_equal_values(V, k):
    x = rand(5, V)
    x[1, :] = 0.5  # every value tied: the first k indices
    x[2, V - 1] = x[2].max() + 1  # the maximum in the tail
    x[3] = rand(V, seed=1).bfloat16().float()  # bf16-rounded: many exact repeats
    val, idx = cpu_layer.topk(x, k)
    want = x.topk(k, dim=-1).values
    assert torch.equal(val, want) and torch.equal(x.gather(1, idx), val)
    assert idx[1].tolist() == list(range(k))
    for row, got in zip(x, idx):  # among equal values, ascending indices: a stable descending sort's order
        assert got.tolist() == torch.sort(row, descending=True, stable=True).indices[:k].tolist()


@pytest.mark.parametrize("bad", ["nan", "all -inf", "k past 256"])
def test_topk_leaves_a_nan_too_few_finite_values_or_a_large_k_to_torch(bad):
    x = rand(2, 300)
    if bad == "all -inf":
        x[1, 2:] = float("-inf")  # 2 values above -inf, 3 asked
    elif bad == "nan":
        x[1, 7] = float("nan")
    assert cpu_layer.topk(x, 257 if bad == "k past 256" else 3) is None


def test_runner_keeps_its_torch_path_when_the_kernels_cannot_build(monkeypatch):
    from tools.tiny import tiny_model

    monkeypatch.setenv("CC", "/nonexistent/cc")
    cpu_layer.lib.cache_clear()
    try:
        runner = rt.FastRunner(tiny_model(0))
        assert not runner.kernels and runner.att == torch.float32
        assert "C compiler" in runner.kernels_reason
        hid, _ = runner.forward(torch.tensor([3, 4, 5]), torch.arange(3))
        assert torch.isfinite(runner.logits(hid)).all()
    finally:
        cpu_layer.lib.cache_clear()


def test_pipeline_runtime_note_says_which_path_runs_and_why():
    from types import SimpleNamespace
    from core.pipeline import runtime_note
    fast = dict(runtime_name="fast", fallback_reason="", exact_reason="")
    assert runtime_note(SimpleNamespace(**fast, kernels_reason="")) == "fast, exact"
    assert runtime_note(SimpleNamespace(**fast, kernels_reason="no C compiler")) \
        == "fast, torch ops (no C compiler), exact"
    assert runtime_note(SimpleNamespace(runtime_name="eager", fallback_reason="not covered")) \
        == "eager (not covered), lossless up to rounding"
    on_codes = SimpleNamespace(**fast, kernels_reason="", on_codes=True, head_weight=torch.zeros(1, dtype=torch.bfloat16))
    assert runtime_note(on_codes) == "fast bf16 on its GGUF codes, exact"


def test_a_head_dim_the_kernels_do_not_tile_keeps_the_torch_path():
    from tools.tiny import tiny_model
    runner = rt.FastRunner(tiny_model(0, d=32))  # 4 heads of 8
    assert not runner.kernels and "multiple of 16" in runner.kernels_reason
    ref = runner.model(input_ids=torch.tensor([[3, 4, 5]])).logits[0]
    hid, _ = runner.forward(torch.tensor([3, 4, 5]), torch.arange(3))
    torch.testing.assert_close(runner.logits(hid), ref.float(), atol=1e-4, rtol=0)


@pytest.mark.skipif(not cpu_layer.int4_available(), reason="no AVX512-VNNI: int4 draft weights use torch's kernel")
@pytest.mark.parametrize("rows", [1, 2, 6])
def test_int4_product_matches_its_dequantized_matrix_up_to_int8_activations(rows):
    w, x = rand(160, 384, seed=1), rand(rows, 384, seed=2)
    codes, scale, lo = int4_codes(w)
    q = cpu_layer.pack_int4(codes)
    pairs = q.view(160, 3, 64)  # byte j of a pair: input j of its 1st group (low nibble), of its 2nd (high)
    codes = torch.stack([pairs & 15, pairs >> 4], 2).view(160, 6, 64).float()
    deq = (codes * scale[..., None] + lo[..., None]).view(160, 384)
    assert (deq - w).abs().max() <= scale.max() / 2 + 1e-6  # rounding to the nearest code
    ref = x @ deq.T
    err = (cpu_layer.int4_mm(x, q, scale, lo) - ref).abs().max() / ref.abs().max()
    assert err < 0.02, float(err)  # int8 rounding of each activation row


@pytest.mark.parametrize("rows, k", [(cpu_layer.INT4_MAX_ROWS + 1, 256), (0, 256), (2, 192), (2, 128)])
def test_int4_product_refuses_shapes_its_kernel_cannot_hold(rows, k):
    q = torch.zeros(16, 128, dtype=torch.uint8)  # packed for 256 inputs
    with pytest.raises(ValueError, match="int4_mm"):
        cpu_layer.int4_mm(torch.zeros(rows, k), q, torch.zeros(16, 4), torch.zeros(16, 4))


@pytest.mark.skipif(not cpu_layer.int4_available(), reason="no AVX512-VNNI: int4 draft weights use torch's kernel")
def test_the_runtime_quantizes_int4_for_its_own_kernel_where_it_is_built():
    assert quantize(rand(64, 256).bfloat16(), "int4")[:2] == ("int4", "vnni")
    assert quantize(rand(64, 192).bfloat16(), "int4")[:2] == ("int4", "torch")  # in not a multiple of 128
