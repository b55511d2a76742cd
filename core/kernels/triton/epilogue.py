"""Head epilogue: log-softmax over the k logits, top-k, positions remapped to full-vocabulary ids.

Shapes: logits [n, k], ids_map LongTensor [k] | None (None = identity) ->
top_ids LongTensor [n, topk], top_logp fp32 [n, topk], best first; equal logits: lower position first
(ties are decided on the logits; log-softmax keeps their order).
Program instance r owns row r: one pass for log Z = m + log sum_j exp(x_j - m) (online max m),
then topk passes, pass t picking the largest (x, -position) after pick t-1, so the order is exact
(value descending, position ascending) with no sort and no scratch memory.
"""
from __future__ import annotations  # kernel signatures say tl.constexpr before tl exists

import torch

from core.kernels.triton.backend import jit, use_triton

tl = None  # triton.language, bound by core.kernels.triton.backend.jit on the first Triton call

GPU_CONFIGS = [dict(BLOCK_K=1024, num_warps=4), dict(BLOCK_K=2048, num_warps=8), dict(BLOCK_K=4096, num_warps=8)]
INTERPRETER_CONFIG = dict(BLOCK_K=2048)  # few, large tiles: the interpreter pays per tile


def head_epilogue_kernel(logits, ids_map, top_ids, top_logp, k, topk, stride_l, stride_o,
                         HAS_MAP: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    x_row = logits + row * stride_l
    offs = tl.arange(0, BLOCK_K)
    m = tl.full([], -3.4028234663852886e38, tl.float32)  # finite start: exp(m - m_new) never NaN
    s = tl.zeros([], tl.float32)
    for k0 in range(0, k, BLOCK_K):  # s = sum_j exp(x_j - m), rescaled as the max m grows
        x = tl.load(x_row + k0 + offs, mask=k0 + offs < k, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    log_z = m + tl.log(s)
    prev_x = tl.full([], float("inf"), tl.float32)
    prev_p = tl.full([], -1, tl.int32)
    for t in range(topk):
        best_x = tl.full([], float("-inf"), tl.float32)
        best_p = tl.full([], k, tl.int32)  # k = none yet
        for k0 in range(0, k, BLOCK_K):
            pos = k0 + offs
            x = tl.load(x_row + pos, mask=pos < k, other=float("-inf")).to(tl.float32)
            # candidates rank after pick t-1 in the order (x descending, position ascending)
            after = (pos < k) & ((x < prev_x) | ((x == prev_x) & (pos > prev_p)))
            cx = tl.max(tl.where(after, x, float("-inf")), 0)
            cp = tl.min(tl.where(after & (x == cx), pos, k), 0)
            better = (cx > best_x) | ((cx == best_x) & (cp < best_p))
            best_x = tl.where(better, cx, best_x)
            best_p = tl.where(better, cp, best_p)
        if HAS_MAP:
            best_id = tl.load(ids_map + best_p)
        else:
            best_id = best_p.to(tl.int64)
        tl.store(top_ids + row * stride_o + t, best_id)
        tl.store(top_logp + row * stride_o + t, best_x - log_z)  # log p = x - log Z
        prev_x, prev_p = best_x, best_p


def head_epilogue_triton(logits: torch.Tensor, ids_map: torch.Tensor | None, topk: int):
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    n, k = logits.shape
    top_ids = torch.empty(n, topk, dtype=torch.long, device=logits.device)
    top_logp = torch.empty(n, topk, dtype=torch.float32, device=logits.device)
    if n == 0 or topk == 0:
        return top_ids, top_logp
    kernel = jit(head_epilogue_kernel, GPU_CONFIGS, INTERPRETER_CONFIG, key=["HAS_MAP"])
    map_arg = logits if ids_map is None else ids_map.to(logits.device).contiguous()  # a dummy pointer when HAS_MAP is False
    kernel[(n,)](logits, map_arg, top_ids, top_logp, k, topk, logits.stride(0), top_ids.stride(0),
                 HAS_MAP=ids_map is not None)
    return top_ids, top_logp


def stable_topk(x: torch.Tensor, topk: int) -> torch.Tensor:
    """[n, topk] positions of each row's topk largest, ties in position order: the first topk of a stable
    descending sort (NaN first, as sort puts it), from the candidates >= the topk-th value alone."""
    if topk == 0 or x.shape[0] == 0:
        return torch.empty(x.shape[0], topk, dtype=torch.long, device=x.device)
    kth = x.topk(topk, dim=-1).values[:, -1:]  # [n, 1]
    rows = []
    for row, cut in zip(x, kth):
        # ascending positions; at least topk of them, NaN counting as the largest (a NaN cut: the NaNs alone)
        cand = ((row >= cut) | row.isnan()).nonzero().squeeze(1)
        rows.append(cand[torch.sort(row[cand], descending=True, stable=True).indices[:topk]])
    return torch.stack(rows)


def head_epilogue_torch(logits: torch.Tensor, ids_map: torch.Tensor | None, topk: int):
    x = logits.float()
    pos = stable_topk(x, topk)  # ties go to the lower position
    top_logp = torch.log_softmax(x, dim=-1).gather(1, pos)
    top_ids = pos if ids_map is None else ids_map.to(pos.device)[pos]
    return top_ids.contiguous(), top_logp


def head_epilogue(logits: torch.Tensor, ids_map: torch.Tensor | None, topk: int, backend: str = "auto"):
    """(top_ids [n, topk] full-vocabulary ids, top_logp fp32 [n, topk]) of log_softmax(logits).

    topk is clamped to k (an I_t smaller than topk yields k columns)."""
    topk = max(0, min(topk, logits.shape[-1]))
    if use_triton(backend, logits.device):
        return head_epilogue_triton(logits, ids_map, topk)
    return head_epilogue_torch(logits, ids_map, topk)
