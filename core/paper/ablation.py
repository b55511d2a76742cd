"""Table 5 (viz.paper.fig_table): stream-source ablations and the LM-head layout (indexed GEMM vs repack)."""
import statistics
import time

from core.paper.grid import ABLATIONS, _of
from core.trace.stats import aggregate

ABLATION_COLS = ["variant", "sources", "status", "coverage", "mean_accept_len", "mean_active_vocab", "tokens_per_s",
                 "lm_head_ms_per_call"]


def ablation_table(rows, ids, gemm) -> list:
    """Table 5: stream-source ablations on the sweep prompts and the LM head over
    I_t as an indexed GEMM vs the repack buffer (microbenchmark at the measured |I_t|)."""
    out = []
    for name, (_, sources) in ABLATIONS.items():
        g = _of(rows, name, ids)
        if g:
            a = aggregate(g)
            out.append({"variant": name, "sources": sources, "status": "measured", "coverage": round(a["coverage"], 4),
                        "mean_accept_len": round(a["mean_accept_len"], 3), "mean_active_vocab": round(a["mean_active_vocab"], 1),
                        "tokens_per_s": round(a["tokens_per_s"], 3), "lm_head_ms_per_call": round(a["timing_ms"]["lm_head"] / a["draft_calls"], 4)})
    for name, ms in (gemm or {}).items():
        if not name.startswith("_"):
            out.append({"variant": name, "sources": "LM head over I_t", "status": "microbenchmark",
                        "mean_active_vocab": gemm["_active"], "lm_head_ms_per_call": ms})
    return out


def gemm_vs_repack(pipe, rows, n=None, reps=30) -> dict:
    """ms per LM-head call over I_t at the measured mean |I_t|: h @ W[idx]ᵀ (gather every call) vs
    h @ bufᵀ plus the repack of the rows that enter, amortised over the calls of a step. Interleaved."""
    import torch

    from core.kernels import triton as kernels
    g = _of(rows, "nanospec")
    if not g:
        return {}
    a = aggregate(g)
    W = pipe.drafter.head_weight
    V, d = W.shape
    n_active = max(int(a["mean_active_vocab"]), 1)
    moved = sum(r["trace"]["sources"].get("draft", 0) + r["trace"]["sources"].get("verify", 0) for r in g) // a["steps"]
    gen = torch.Generator().manual_seed(0)
    idx = torch.randperm(V, generator=gen)[:n_active].to(W.device)
    h = torch.randn(n or 4, d, generator=gen).to(W.device, W.dtype)
    buf = W.index_select(0, idx).contiguous()
    slots, ids = torch.arange(min(moved, n_active)), idx[:min(moved, n_active)]
    calls_per_step = a["draft_calls"] / a["steps"]
    t_idx, t_buf, t_rep = [], [], []
    for _ in range(reps):
        t_idx.append(_ms(lambda: h @ W.index_select(0, idx).T))
        t_buf.append(_ms(lambda: h @ buf.T))
        t_rep.append(_ms(lambda: kernels.repack_rows(buf, W, slots.to(W.device), ids, "torch")))
    med = statistics.median
    return {"indexed GEMM (gather W[I_t] each call)": round(med(t_idx), 4),
            "repack buffer (+ repack amortised)": round(med(t_buf) + med(t_rep) / max(calls_per_step, 1e-9), 4),
            "_active": n_active}


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000
