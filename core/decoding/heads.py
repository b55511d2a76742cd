"""Draft LM heads: one class, three choices.

    logits = proj(h) @ R[I]ᵀ
    R     = W [V, d] (full rows)           or W_up [V, r] (SlimSpec rows, proj = h @ W_downᵀ)
    I     = all of V | a static set (FR-Spec) | the NanoSpec stream's I_t

full = (W, V), frspec = (W, static), nanospec = (W, I_t), slimspec = (W_up, V), nanoslim = (W_up, I_t).
Restricted heads keep R[I] in a dense repack buffer; the stream's updates touch only the moved rows.

A low-rank head may rescore (`rescore` = m > 0, SVD-softmax, Shim et al. 2017): its logits are a preview, and the
union U of each row's top-m preview ids is scored again with the full rows, h @ W[U]ᵀ. The draft then picks among
exact logits; tokens outside U get q = 0, as tokens outside I_t do.

NanoSpec may preview too (`preview` = m > 0): each row also scores, with the full rows, its top-m ids of the low-rank
head over the whole vocabulary, I_t ∪ U. The stream's misses are rare tokens that a strong draft does propose; the
preview catches them at the cost of one low-rank product over V per call.
"""
from contextlib import nullcontext

import torch

from core.kernels import triton as kernels
from core.kernels.cpu import cpu_layer, lowrank_mm
from core.errors import SpecError
from core.trace.record import SOURCES
from core.decoding.stream import CandidateStream, StreamEvent


class DraftHead:
    def __init__(self, name, rows, down=None, static_ids=None, stream=None, k_pre=3, k_ver=3, backend="torch",
                 sources=SOURCES, exact=None, rescore=0, preview=None):
        cpu_bf16 = rows.device.type == "cpu" and rows.dtype == torch.bfloat16
        self.over_v = None if kernels.use_triton(backend, rows.device) else (  # W_up packed for lowrank_mm.c
            lowrank_mm.packed(preview[0]) if preview is not None else
            lowrank_mm.packed(rows) if down is not None and static_ids is None and stream is None else None)
        if cpu_bf16 and down is not None:
            # the CPU low-rank product runs in fp32 (lowrank_logits_torch): cast the factors once, not per call
            rows, down = rows.float(), down.float()
        self.name, self.rows, self.down, self.stream, self.sources = name, rows, down, stream, set(sources)
        self.k_pre, self.k_ver, self.backend = k_pre, k_ver, backend
        self.exact, self.rescore = exact, rescore  # W [V, d] for the rescoring / preview pass
        if preview is not None and cpu_bf16:
            preview = (preview[0].float(), preview[1].float(), preview[2])
        self.preview = preview  # (W_up, W_down, m)
        self.vocab_size = rows.shape[0]
        self.static_ids = static_ids
        self.buf = None
        # bf16 rows on the CPU: the buffer holds them in fp32 (a [n, d] @ [d, |I|] product there is ~5x faster
        # than in bf16, which has no packed path for a buffer that changes every step); same values
        dtype = torch.float32 if cpu_bf16 else rows.dtype
        if static_ids is not None:
            self.buf = rows.index_select(0, static_ids.to(rows.device)).to(dtype).contiguous()
        elif stream is not None:
            # zeros, not empty: touch every page now rather than in the timed repacks as I_t grows
            self.buf = torch.zeros(stream.W, rows.shape[1], dtype=dtype, device=rows.device)
        self._in_vocab = None

    @property
    def needs_prefill_logits(self) -> bool:
        """Whether S⁽⁰⁾ takes the top-K_pre of every prompt row's logits (else the prefill needs the last row alone)."""
        return self.stream is not None and self.k_pre > 0 and "prefill" in self.sources

    def active_ids(self):
        """I (full-vocabulary ids in buffer order), or None for the whole vocabulary."""
        if self.stream is not None:
            return self.stream.active_ids()
        return self.static_ids

    def n_active(self) -> int:
        ids = self.active_ids()
        return self.vocab_size if ids is None else ids.numel()

    def in_vocab(self, token_ids) -> list:
        ids = self.active_ids()
        if ids is None:
            return [True] * len(token_ids)
        if self.stream is not None:
            return [bool(self.stream.slot_of[t] >= 0) for t in token_ids]
        if self._in_vocab is None:
            self._in_vocab = set(ids.tolist())
        return [int(t) in self._in_vocab for t in token_ids]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [n, d] -> fp32 logits [n, |I|] over active_ids() order."""
        rows = self.rows if self.buf is None else self.buf[: self.n_active()]
        if self.down is not None and self.buf is None and self.over_v is not None:
            return self.over_v(h.float() @ self.down.float().T)  # ([n, d] @ [d, r]) @ [r, V]
        if self.down is not None:
            return kernels.lowrank_logits(h, self.down, rows, None, self.backend)  # ([n,d]@[d,r])@[r,|I|]
        if kernels.use_triton(self.backend, h.device):
            return kernels.gathered_gemm(h.to(rows.dtype), rows, None, self.backend)
        return (h.to(rows.dtype) @ rows.T).float()  # [n, d] @ [d, |I|]

    def score(self, h: torch.Tensor) -> tuple:
        """h [n, d] -> (fp32 logits [n, k], their full-vocabulary ids [k] or None for the whole vocabulary)."""
        logits, ids = self.logits(h), self.active_ids()
        if self.rescore:
            top = logits.topk(min(self.rescore, logits.shape[1]), dim=-1).indices.unique()  # U: union of rows' top-m
            cand = top if ids is None else ids[top.to(ids.device)]
            rows = self.exact.index_select(0, cand.to(self.exact.device))
            return (h.to(rows.dtype) @ rows.T).float(), cand  # [n, d] @ [d, |U|]
        if self.preview is not None:
            extra = self._preview_ids(h)
            rows = self.exact.index_select(0, extra.to(self.exact.device))
            return torch.cat([logits, h.float() @ rows.float().T], 1), torch.cat([ids, extra.to(ids.device)])
        return logits, ids

    def _preview_ids(self, h: torch.Tensor) -> torch.Tensor:
        """U minus I_t: the ids of each row's top-m low-rank logits over V that are not in I_t."""
        up, down, m = self.preview
        low = (self.over_v(h.float() @ down.float().T) if self.over_v is not None
               else kernels.lowrank_logits(h, down, up, None, self.backend))
        top = _topk(low, min(m, up.shape[0])).unique().cpu()  # U: union of the rows' top-m, [n, d] @ [d, r] @ [r, V]
        return top[self.stream.slot_of[top] < 0]

    def top_pre(self, logits) -> torch.Tensor:
        """top-K_pre ids of each row of prompt logits [n, V] -> [n * K_pre], row by row, best first."""
        return _topk_ids(logits, self.k_pre)

    def on_prefill(self, prompt_ids, prefill_top, timer=None) -> StreamEvent | None:
        """S⁽⁰⁾ = prompt ⊕ prefill_top, the top-K_pre ids of every prompt position's logits in order (top_pre)."""
        if self.stream is None:
            return None
        top = torch.as_tensor(prefill_top, dtype=torch.long).view(-1)
        return self._apply(self.stream.append(self._chunks([(prompt_ids, "prompt"), (top, "prefill")])), timer)

    def on_verify(self, tree_ids, verify_logits, timer=None) -> StreamEvent | None:
        """S ← S ⊕ C_draft (unique draft-tree ids) ⊕ C_ver (top-K_ver of the verify logits)."""
        if self.stream is None:
            return None
        c_draft = torch.unique(torch.as_tensor(tree_ids, dtype=torch.long)) if len(tree_ids) else _empty()
        c_ver = _topk_ids(verify_logits, self.k_ver)
        return self._apply(self.stream.append(self._chunks([(c_draft, "draft"), (c_ver, "verify")])), timer)

    def _chunks(self, chunks) -> list:
        """Only the enabled sources enter S (source ablations)."""
        return [(ids, src) if src in self.sources else (_empty(), src) for ids, src in chunks]

    def _apply(self, ev: StreamEvent, timer=None) -> StreamEvent:
        """Repack: buf[slots] = R[ids] for the rows that entered or moved (the "gather" time)."""
        slots, ids = ev.moves
        with timer("gather") if timer else nullcontext():
            kernels.repack_rows(self.buf, self.rows, slots, ids, self.backend)
        return ev


def _topk_ids(logits, k) -> torch.Tensor:
    if k == 0 or logits.numel() == 0:
        return _empty()
    return _topk(logits, k).reshape(-1).cpu()


def _topk(x, k) -> torch.Tensor:
    """[n, k] indices of each row's k largest, best first: one C pass on the CPU (cpu_layer.topk), else torch's."""
    got = cpu_layer.topk(x, k) if x.device.type == "cpu" else None
    return got[1] if got is not None else x.topk(k, dim=-1).indices


def _empty():
    return torch.zeros(0, dtype=torch.long)


def svd_factors(W: torch.Tensor, rank: int):
    """Truncated SVD: W [V, d] ≈ W_up [V, r] · W_down [r, d] (training-free SlimSpec init), in W's dtype;
    computed in at least fp32 (fp64 for an fp64 W)."""
    # W = U S V^T  ->  W_up = U_r sqrt(S_r), W_down = sqrt(S_r) V_r^T
    U, S, Vh = torch.linalg.svd(W.to(torch.promote_types(W.dtype, torch.float32)), full_matrices=False)
    root = S[:rank].sqrt()
    return (U[:, :rank] * root).to(W.dtype).contiguous(), (root[:, None] * Vh[:rank]).to(W.dtype).contiguous()


def uses_factors(method: str, preview: int) -> bool:
    """Whether the head needs low-rank factors: SlimSpec's and NanoSlim's rows, or NanoSpec's preview."""
    return method in ("slimspec", "nanoslim") or (method == "nanospec" and preview > 0)


STREAM_METHODS = ("nanospec", "nanoslim")  # heads over the stream's I_t (their S⁽⁰⁾ reads every prompt row's logits)


def build_head(method, W, cfg, fr_ids=None, slim=None, backend="torch") -> DraftHead:
    """method in full|frspec|nanospec|slimspec|nanoslim; W = the draft's full LM head [V, d];
    slim = (W_up, W_down) trained factors, else SVD of W at cfg.rank (0 = d/8); NanoSpec previews with them when
    cfg.preview > 0."""
    V, d = W.shape
    low_rank = method in ("slimspec", "nanoslim")
    if slim is None and uses_factors(method, cfg.preview):
        slim = svd_factors(W, cfg.rank or max(d // 8, 1))
    rows, down = slim if low_rank else (W, None)
    if method == "frspec" and fr_ids is None:
        raise SpecError("frspec needs a frequency table (python -m core freq)")
    stream = CandidateStream(V, cfg.w_max, cfg.window, backend) if method in STREAM_METHODS else None
    static = fr_ids if method == "frspec" else None
    preview = (*slim, cfg.preview) if method == "nanospec" and cfg.preview else None
    rescore = cfg.rescore if low_rank else 0  # rescoring is a low-rank head's; NanoSpec's full rows need none
    exact = W if rescore or preview is not None else None
    return DraftHead(method, rows, down, static, stream, cfg.k_pre, cfg.k_ver, backend, cfg.source_set(), exact,
                     rescore, preview)
