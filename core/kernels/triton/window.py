"""Window counts of Suffix(S, W_max): which ids enter and leave I_t = {v : counts[v] > 0}.

Shapes: counts IntTensor [V] (updated in place), appended LongTensor [a], evicted LongTensor [e]
-> entered, left: LongTensor, each id once, ascending. counts[v] += #appended(v) - #evicted(v);
entered: counts went 0 -> > 0; left: > 0 -> 0 (ids both appended and evicted with no net change
are in neither). Evicted ids must be in the window (counts never go negative).

Triton path: the wrapper sorts the a + e touched ids on the device (torch.sort, no sync); then one
program walks them in BLOCK chunks, three phases apart by barriers:
  1. before[j] = counts[ids[j]] at the first occurrence j of each id;
  2. counts[ids[j]] += delta[j] for every occurrence (atomics: repeats add up);
  3. after = counts[ids[j]]; entered / left are compacted by a prefix sum of the flags, so they stay
     ascending, into fixed [a + e] buffers plus a count pair n_out = (|entered|, |left|).
The only host sync is the wrapper reading n_out to trim those buffers (`window_update_padded` skips it).
"""
from __future__ import annotations  # kernel signatures say tl.constexpr before tl exists

import torch

from core.kernels.triton.backend import jit, use_triton

tl = None  # triton.language, bound by core.kernels.triton.backend.jit on the first Triton call

GPU_CONFIGS = [dict(BLOCK=256, num_warps=4), dict(BLOCK=1024, num_warps=8)]
INTERPRETER_CONFIG = dict(BLOCK=64)


def window_update_kernel(counts, ids, delta, before, entered, left, n_out, t, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for j0 in range(0, t, BLOCK):  # 1. counts before the update, once per id
        j = j0 + offs
        x = tl.load(ids + j, mask=j < t, other=-1)
        first = (j < t) & (x != tl.load(ids + j - 1, mask=(j > 0) & (j < t), other=-1))
        tl.store(before + j, tl.load(counts + x, mask=first, other=0), mask=first)
    tl.debug_barrier()
    for j0 in range(0, t, BLOCK):  # 2. +1 per appended occurrence, -1 per evicted one
        j = j0 + offs
        x = tl.load(ids + j, mask=j < t, other=0)
        tl.atomic_add(counts + x, tl.load(delta + j, mask=j < t, other=0), mask=j < t)
    tl.debug_barrier()
    n_in = tl.zeros([], tl.int32)
    n_left = tl.zeros([], tl.int32)
    for j0 in range(0, t, BLOCK):  # 3. transitions, compacted in ascending id order
        j = j0 + offs
        x = tl.load(ids + j, mask=j < t, other=-1)
        first = (j < t) & (x != tl.load(ids + j - 1, mask=(j > 0) & (j < t), other=-1))
        b = tl.load(before + j, mask=first, other=0)
        a = tl.atomic_add(counts + x, tl.zeros_like(b), mask=first)  # read back through the atomics' cache level
        went_in = (first & (b == 0) & (a > 0)).to(tl.int32)
        went_out = (first & (b > 0) & (a == 0)).to(tl.int32)
        tl.store(entered + n_in + tl.cumsum(went_in, 0) - 1, x, mask=went_in != 0)
        tl.store(left + n_left + tl.cumsum(went_out, 0) - 1, x, mask=went_out != 0)
        n_in += tl.sum(went_in, 0)
        n_left += tl.sum(went_out, 0)
    tl.store(n_out, n_in)
    tl.store(n_out + 1, n_left)


def window_update_padded(counts: torch.Tensor, appended: torch.Tensor, evicted: torch.Tensor):
    """Triton path without host sync: (entered [a+e], left [a+e], n_out int32 [2]); valid prefixes n_out."""
    device = counts.device
    touched = torch.cat([appended.to(device), evicted.to(device)])
    delta = torch.cat([torch.ones(appended.numel(), dtype=counts.dtype, device=device),
                       -torch.ones(evicted.numel(), dtype=counts.dtype, device=device)])
    ids, order = torch.sort(touched)
    t = ids.numel()
    entered, left = torch.empty(t, dtype=torch.long, device=device), torch.empty(t, dtype=torch.long, device=device)
    n_out = torch.zeros(2, dtype=torch.int32, device=device)
    if t == 0:
        return entered, left, n_out
    before = torch.empty(t, dtype=counts.dtype, device=device)
    kernel = jit(window_update_kernel, GPU_CONFIGS, INTERPRETER_CONFIG, key=[], restore_value=["counts"])
    kernel[(1,)](counts, ids, delta[order].contiguous(), before, entered, left, n_out, t)
    return entered, left, n_out


def window_update_triton(counts: torch.Tensor, appended: torch.Tensor, evicted: torch.Tensor):
    entered, left, n_out = window_update_padded(counts, appended, evicted)
    n_in, n_left = n_out.tolist()  # the one host sync: the lengths of the returned tensors
    return entered[:n_in], left[:n_left]


def window_update_torch(counts: torch.Tensor, appended: torch.Tensor, evicted: torch.Tensor):
    device = counts.device
    touched = torch.cat([appended.to(device), evicted.to(device)])
    delta = torch.cat([torch.ones(appended.numel(), dtype=counts.dtype, device=device),
                       -torch.ones(evicted.numel(), dtype=counts.dtype, device=device)])
    ids, inverse = torch.unique(touched, sorted=True, return_inverse=True)
    net = torch.zeros(ids.numel(), dtype=counts.dtype, device=device).index_add_(0, inverse, delta)
    before = counts[ids]
    after = before + net
    counts[ids] = after
    return ids[(before == 0) & (after > 0)], ids[(before > 0) & (after == 0)]


def window_update(counts: torch.Tensor, appended: torch.Tensor, evicted: torch.Tensor, backend: str = "auto"):
    """counts += occurrences(appended) - occurrences(evicted), in place; returns (entered, left) ascending."""
    if use_triton(backend, counts.device):
        return window_update_triton(counts, appended, evicted)
    return window_update_torch(counts, appended, evicted)
