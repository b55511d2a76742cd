"""Every Triton kernel equals its torch reference (Triton interpreter on the CPU).

Fresh random inputs over shapes that are not multiples of the block sizes, n = 1 and n > 1, fp32
(rel. error < 1e-5) and bf16 (< 1e-2); every output the kernels allocate starts as garbage
(`poisoned_empty`), so an element a kernel forgets to write fails.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton decorates anything: kernels run on the CPU

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from core.kernels import triton as kernels  # noqa: E402
from core.errors import SpecError  # noqa: E402
from bench.suites import lm_head as bench  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16]
FIX = "put os.environ.setdefault('TRITON_INTERPRET', '1') at the top of tests/conftest.py"
interpreted = pytest.mark.skipif(not (kernels.interpreting() and kernels.triton_interprets()),
                                 reason=f"Triton is not in interpreter mode here: {FIX}")


@pytest.fixture(autouse=True)
def poisoned_empty(monkeypatch):
    real_empty = torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.is_floating_point():
            return t.fill_(float("nan"))
        return t.fill_(-987654) if t.dtype in (torch.int32, torch.int64) else t
    monkeypatch.setattr(torch, "empty", empty)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def randint(high, size, seed=0):
    return torch.randint(0, high, (size,), generator=torch.Generator().manual_seed(seed))


def test_triton_runs_in_interpreter_mode_in_this_process():
    """Fails when another test module imported triton (e.g. via transformers -> torch._dynamo) first."""
    assert kernels.interpreting() and kernels.triton_interprets(), FIX


@interpreted
def test_backend_choice():
    cpu = torch.device("cpu")
    assert kernels.use_triton("torch", cpu) is False
    assert kernels.use_triton("auto", cpu) is False  # auto = Triton on CUDA only
    assert kernels.use_triton("triton", cpu) is True  # under TRITON_INTERPRET=1
    with pytest.raises(SpecError, match="auto|triton|torch"):
        kernels.use_triton("cuda", cpu)


def test_triton_on_cpu_without_interpreter_is_a_spec_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(SpecError, match="TRITON_INTERPRET=1"):
        kernels.gathered_gemm(rand(2, 8), rand(10, 8), torch.arange(3), "triton")


def test_importing_kernels_before_setting_the_interpreter_is_harmless():
    code = ("import os; os.environ.pop('TRITON_INTERPRET', None); import torch; from core.kernels import triton as kernels; "
            "os.environ['TRITON_INTERPRET'] = '1'; "
            "out = kernels.gathered_gemm(torch.ones(1, 4), torch.ones(3, 4), torch.tensor([2]), 'triton'); "
            "assert out.tolist() == [[4.0]], out")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


@interpreted
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("C,V,d,m", [(500, 3000, 96, 37), (40, 700, 50, 1), (300, 2000, 130, 0)])
def test_repack_rows_writes_exactly_the_listed_rows(dtype, C, V, d, m):
    W = rand(V, d, dtype=dtype, seed=m)
    slots, ids = torch.randperm(C)[:m], randint(V, m, seed=d)
    buf = torch.full((C, d), float("nan"), dtype=dtype)
    buf[::3] = rand(len(buf[::3]), d, dtype=dtype, seed=1)  # other rows: stale contents that must survive
    ref = buf.clone()
    kernels.repack_rows_torch(ref, W, slots, ids)
    kernels.repack_rows(buf, W, slots, ids, "triton")
    torch.testing.assert_close(buf, ref, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(buf[slots], W[ids])


@interpreted
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d,V,k", [(1, 96, 3000, 300), (5, 50, 1000, 129), (20, 33, 2000, 64), (70, 40, 300, 100)])
def test_gathered_gemm_is_h_times_gathered_rows(dtype, n, d, V, k):
    h, W, idx = rand(n, d, dtype=dtype, seed=n), rand(V, d, dtype=dtype, seed=d), randint(V, k, seed=k)
    out = kernels.gathered_gemm(h, W, idx, "triton")
    assert out.dtype == torch.float32 and out.shape == (n, k)
    assert rel_err(out, kernels.gathered_gemm_torch(h, W, idx)) < TOL[dtype]
    assert rel_err(kernels.gathered_gemm_torch(h, W, idx), h.double() @ W[idx].double().T) < TOL[dtype]


@interpreted
@pytest.mark.parametrize("dtype", DTYPES)
def test_gathered_gemm_without_index_reads_every_row(dtype):
    h, W = rand(3, 40, dtype=dtype, seed=3), rand(150, 40, dtype=dtype, seed=4)
    assert rel_err(kernels.gathered_gemm(h, W, None, "triton"), kernels.gathered_gemm_torch(h, W, None)) < TOL[dtype]


def tie_free_logits(n, k, dtype, seed):
    """Distinct values per row, exact in bf16: a permutation of integers, scaled by 1/8."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(k, generator=g) - k // 2 for _ in range(n)]).to(dtype) / 8


@interpreted
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k,topk,mapped", [(1, 300, 8, True), (3, 129, 5, False), (2, 40, 40, True),
                                            (2, 4500, 4, False)])  # 4500: several interpreter tiles
def test_head_epilogue_is_log_softmax_top_k_remapped(dtype, n, k, topk, mapped):
    logits = tie_free_logits(n, k, dtype, seed=k) if dtype == torch.bfloat16 else rand(n, k, seed=k) * 3
    ids_map = torch.randperm(max(3000, k))[:k] if mapped else None
    top_ids, top_logp = kernels.head_epilogue(logits, ids_map, topk, "triton")
    ref_ids, ref_logp = kernels.head_epilogue_torch(logits, ids_map, topk)
    assert top_ids.dtype == torch.long and top_logp.dtype == torch.float32
    assert torch.equal(top_ids, ref_ids)
    assert rel_err(top_logp, ref_logp) < 1e-5  # both work on the same fp32 values
    expected = torch.log_softmax(logits.double(), -1).topk(topk).values
    assert rel_err(ref_logp, expected) < 1e-5


@interpreted
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_head_epilogue_ties_go_to_the_lower_position(backend):
    logits = torch.zeros(2, 300)
    logits[0, [5, 130, 260, 299]] = 2.0  # equal maxima in three different 128-wide blocks
    logits[0, 7] = 1.0
    logits[1, :6] = torch.tensor([1.0, 3.0, 3.0, 0.5, 3.0, 2.0])
    ids_map = torch.arange(300) + 1000
    top_ids, _ = kernels.head_epilogue(logits, ids_map, 6, backend)
    assert top_ids[0].tolist() == [1005, 1130, 1260, 1299, 1007, 1000]
    assert top_ids[1].tolist() == [1001, 1002, 1004, 1005, 1000, 1003]


@pytest.mark.parametrize("topk", [1, 4, 17, 64])
def test_stable_topk_equals_the_head_of_a_stable_descending_sort(topk):
    g = torch.Generator().manual_seed(topk)
    x = torch.randint(-6, 7, (5, 3000), generator=g).float() / 4  # 13 distinct values: ties everywhere
    x[1, ::7] = float("nan")
    x[2] = float("-inf")
    x[3, 100:] = float("nan")  # NaN at the cut
    ref = torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :topk]
    assert torch.equal(kernels.stable_topk(x, topk), ref)


@interpreted
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_head_epilogue_clamps_topk_to_the_sub_vocabulary_size(backend):
    top_ids, top_logp = kernels.head_epilogue(torch.tensor([[0.0, 2.0, 1.0]]), torch.tensor([7, 8, 9]), 5, backend)
    assert top_ids.tolist() == [[8, 9, 7]] and top_logp.shape == (1, 3)


def window_step(V, w, a, w_max, seed):
    """A window of w ids, then a step appending a ids: the oldest entries beyond w_max are evicted."""
    g = torch.Generator().manual_seed(seed)
    window = torch.randint(0, V // 10, (w,), generator=g)  # few distinct ids: many repeats
    appended = torch.randint(0, V // 10, (a,), generator=g)
    stream = torch.cat([window, appended])
    n_evict = max(0, w + a - w_max)
    return window, appended, stream[:n_evict], stream[n_evict:]


@interpreted
@pytest.mark.parametrize("V,w,a,w_max", [(3000, 200, 150, 250), (1000, 50, 7, 50), (2000, 30, 90, 30),
                                         (500, 0, 40, 100), (500, 20, 0, 20)])
def test_window_update_counts_and_transitions(V, w, a, w_max):
    window, appended, evicted, new_window = window_step(V, w, a, w_max, seed=w + a)
    counts = torch.bincount(window, minlength=V).to(torch.int32)
    ref_counts = counts.clone()
    entered, left = kernels.window_update(counts, appended, evicted, "triton")
    ref_entered, ref_left = kernels.window_update_torch(ref_counts, appended, evicted)
    assert torch.equal(counts, ref_counts)
    assert torch.equal(counts, torch.bincount(new_window, minlength=V).to(torch.int32))
    assert torch.equal(entered, ref_entered) and torch.equal(left, ref_left)
    assert torch.equal(entered, torch.tensor(sorted(set(new_window.tolist()) - set(window.tolist())), dtype=torch.long))
    assert torch.equal(left, torch.tensor(sorted(set(window.tolist()) - set(new_window.tolist())), dtype=torch.long))


@interpreted
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_window_update_reports_net_transitions_only(backend):
    counts = torch.zeros(10, dtype=torch.int32)
    counts[[2, 3, 4]] = torch.tensor([2, 1, 1], dtype=torch.int32)
    appended = torch.tensor([7, 7, 9, 5, 3])  # 7: 0->2 enters once; 9: 0->1 then evicted: no change
    evicted = torch.tensor([9, 2, 2, 4, 3])  # 2: 2->0 leaves; 4: 1->0 leaves; 3: 1 -> 1 stays
    entered, left = kernels.window_update(counts, appended, evicted, backend)
    assert entered.tolist() == [5, 7] and left.tolist() == [2, 4]
    assert counts.tolist() == [0, 0, 0, 1, 0, 1, 0, 2, 0, 0]


@interpreted
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d,r,V,k", [(1, 96, 40, 3000, 300), (12, 50, 17, 700, 77), (3, 64, 24, 500, None)])
def test_lowrank_logits_is_two_chained_projections(dtype, n, d, r, V, k):
    h, W_down, W_up = rand(n, d, dtype=dtype, seed=1), rand(r, d, dtype=dtype, seed=2) / 8, rand(V, r, dtype=dtype, seed=3)
    idx = None if k is None else randint(V, k, seed=4)
    out = kernels.lowrank_logits(h, W_down, W_up, idx, "triton")
    ref = kernels.lowrank_logits_torch(h, W_down, W_up, idx)
    assert out.dtype == torch.float32 and out.shape == (n, V if k is None else k)
    assert rel_err(out, ref) < TOL[dtype]
    rows = W_up if idx is None else W_up[idx]
    assert rel_err(ref, h.double() @ W_down.double().T @ rows.double().T) < TOL[dtype]


def test_bench_prints_one_table_with_triton_rows_unavailable_on_cpu(capsys):
    bench.main(["--device", "cpu", "--d", "64", "--V", "1000", "--I", "128", "--n", "1", "--reps", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert any("torch matmul (full V)" in line for line in lines)
    assert sum("n/a (no GPU)" in line for line in lines) == 3
