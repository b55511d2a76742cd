"""The decoding engine: a generator that yields one StepRecord per step.

    prefill → [draft_tree (+ context branches) → verify → accept → keep the drafter's accepted drafts → update stream
               → extend drafter with the rest]* (speculative)
    prefill → [one target step]*                                                              (method "ar")

A drafter of None with a context drafter is pure prompt lookup: the tree holds context branches only,
and a step with no match verifies the root alone (one plain step).
"""
import time
from contextlib import contextmanager

import torch

from core.decoding.context import ContextDrafter, ModelSwitch, SwitchPrior
from core.decoding.draft import DraftState
from core.decoding.protocols import Drafter, Head, Runner
from core.decoding.tree import (
    Tree,
    accept_greedy,
    accept_sample,
    draft_tree,
    held_rows,
    merge_context,
    target_probs,
    tree_shape,
    verify_inputs,
)
from core.trace.record import TIMERS, StepRecord
from core.trace.stats import tie_tolerance


class Timer:
    """Accumulates wall time per section (ms); synchronises CUDA only when timing is on."""

    def __init__(self, enabled=True, device=None):
        self.enabled, self.cuda = enabled, device is not None and torch.device(device).type == "cuda"
        self.ms = {k: 0.0 for k in TIMERS}

    @contextmanager
    def __call__(self, key):
        if self.cuda and self.enabled:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        yield
        if self.cuda and self.enabled:
            torch.cuda.synchronize()
        self.ms[key] += (time.perf_counter() - t0) * 1000

    def take(self, total_ms) -> dict:
        out, self.ms = self.ms, {k: 0.0 for k in TIMERS}
        out["other"] = max(total_ms - sum(v for k, v in out.items() if k != "other"), 0.0)
        return out


@torch.no_grad()
def generate(target: Runner, drafter: Drafter | None, head: Head | None, prompt_ids, cfg, eos_ids=(), fr_rank=None,
             decode=None, should_stop=lambda: False, switch_prior: SwitchPrior | None = None):
    """Yield StepRecords. drafter/head: None for method "ar"; drafter None (and head None) with a speculative
    method: context drafting alone. switch_prior: where the model drafts beside the context, the calibrated costs
    its ModelSwitch starts from."""
    gen = torch.Generator().manual_seed(cfg.seed)
    timer = Timer(cfg.timing, target.device)
    decode = decode or (lambda ids: "")
    t0 = time.perf_counter()
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long).view(-1)
    with timer("verify"):
        target.reset()
        hidden, feats = target.forward(prompt, torch.arange(prompt.numel()), None)
        target.commit(torch.arange(prompt.numel()))
        last = target.logits(hidden[-1:])  # [1, V]: the root's row, one row alone whatever the method
        rows = target.logits(hidden[:-1]) if head is not None and head.needs_prefill_logits and len(prompt) > 1 \
            else None  # [n - 1, V]: NanoSpec's top-K_pre of every prompt row
    best, top = target.top2(last)
    root = _pick(last[0], best[0], cfg, gen)
    rec = StepRecord(step=0, kind="prefill", **_margins(top, target))
    spec = cfg.method != "ar" and (drafter is not None or head is not None or cfg.context == "on")
    ctx = _context_drafter(cfg, drafter, prompt.tolist() + [root], switch_prior) if spec else None
    feed = None
    if head is not None:
        ev = head.on_prefill(prompt, last if rows is None else torch.cat([rows, last]), timer)  # bookkeeping: "other"
        _fill_stream(rec, ev, head)
    if drafter is not None and spec:
        with timer("draft_backbone"):
            feed = DraftFeed(drafter, drafter.prefill(prompt, root, feats), lazy=ctx is not None)
    budget = cfg.max_new_tokens
    root_pos = prompt.numel()
    _emit(rec, [root], [None], [True], fr_rank, decode, eos_ids, budget)
    rec.timing_ms = timer.take((time.perf_counter() - t0) * 1000)
    budget -= len(rec.emitted)
    step = 0
    while not _is_last(rec, budget, should_stop):
        yield rec
        step += 1
        t0 = time.perf_counter()
        if not spec:
            rec, root = _ar_step(target, root, root_pos, cfg, gen, timer, step)
            root_pos += 1
        else:
            rec, root, n_keep = _spec_step(target, feed, head, ctx, root, root_pos, cfg, gen, timer, step)
            root_pos += n_keep
        _emit(rec, rec.emitted, rec.emitted_draft_p, rec.emitted_in_vocab, fr_rank, decode, eos_ids, budget)
        rec.timing_ms = timer.take((time.perf_counter() - t0) * 1000)
        budget -= len(rec.emitted)
    yield rec


def _context_drafter(cfg, drafter, history, prior=None):
    """The context drafter when context drafting is on (or drafts alone), else None."""
    if cfg.context != "on" and drafter is not None:
        return None
    ctx = ContextDrafter(history)
    if drafter is not None and cfg.temperature == 0:
        ctx.switch = ModelSwitch(prior)  # greedy: timing may steer the tree, the output stays the target's
    return ctx


def _is_last(rec, budget, should_stop) -> bool:
    """True when `rec` is the run's last record; a stop request (truthy; a string says why:
    "stopped", "time limit", ...) is marked on it before it is yielded."""
    if budget <= 0 or rec.finished:
        return True
    reason = should_stop()
    if reason:
        rec.cut = reason if isinstance(reason, str) else "stopped"
    return bool(reason)


def _ar_step(target: Runner, root, root_pos, cfg, gen, timer, step):
    with timer("verify"):
        hidden, _ = target.forward(torch.tensor([root]), torch.tensor([root_pos]), None)
        target.commit(torch.tensor([0]))
        logits = target.logits(hidden)
    best, top = target.top2(logits)
    tok = _pick(logits[0], best[0], cfg, gen)
    rec = StepRecord(step=step, kind="ar", emitted=[tok], emitted_draft_p=[None], emitted_in_vocab=[True],
                     **_margins(top, target))
    return rec, tok


class DraftFeed:
    """The model drafter and its state. Lazy (with context drafting, which may skip the model for a step): a
    step's (tokens, target features) wait in a queue, and the next step that drafts feeds them in one call."""

    def __init__(self, drafter: Drafter, state, lazy=False):
        self.drafter, self.state, self.lazy, self.queue = drafter, state, lazy, []

    def push(self, ids, feats, timer) -> None:
        self.queue.append((ids, feats))
        if not self.lazy:
            self.flush(timer)

    def flush(self, timer) -> DraftState:
        if self.queue:
            ids, feats = zip(*self.queue)
            self.queue = []
            with timer("draft_backbone"):
                self.state = self.drafter.extend(torch.cat(ids), torch.cat(feats))
        return self.state


def _draft(feed: DraftFeed, head: Head, ctx, root_pos, cfg, gen, timer) -> Tree:
    """The model's tree, with the context branches merged in when context drafting is on; a step where the
    context suffices (ContextDrafter.use_model) skips the model."""
    branches = ctx.propose(cfg.context_len) if ctx is not None else []
    tree = Tree()
    if feed is not None and (ctx is None or ctx.use_model(branches)):
        tree = draft_tree(feed.drafter, head, feed.flush(timer), root_pos, cfg, gen, timer, prune=ctx is None)
    if ctx is None:
        return tree
    size = len(tree) if not tree or cfg.temperature > 0 else min(len(tree), tree_shape(cfg)[2])
    return merge_context(tree, branches, size, cfg.context_len, cfg.temperature > 0)


def _spec_step(target: Runner, feed: DraftFeed, head: Head, ctx, root, root_pos, cfg, gen, timer, step):
    t0 = time.perf_counter()
    tree = _draft(feed, head, ctx, root_pos, cfg, gen, timer)
    ids, pos, mask = verify_inputs(tree, root, root_pos)
    with timer("verify"):
        hidden, feats = target.forward(ids, pos, mask)
        logits = target.logits(hidden)  # [1 + k, V]
    if cfg.temperature == 0:
        path, bonus, top = accept_greedy(tree, logits, target.top2)
    else:
        path, bonus = accept_sample(tree, logits, cfg.temperature, cfg.top_p, gen)
        top = None
    keep = torch.tensor([0] + [i + 1 for i in path])
    with timer("verify"):
        target.commit(keep)
    held = 0
    if feed is not None and tree.head_calls:  # the drafter keeps the accepted drafts it holds, drops the rest
        with timer("draft_backbone"):
            held = feed.drafter.rollback(held_rows(tree, path))
    # membership in the I_t the draft used at this step
    in_vocab = head.in_vocab(tree.tokens + [bonus]) if head is not None else [True] * (len(tree) + 1)
    emitted = [tree.tokens[i] for i in path] + [bonus]
    if ctx is not None:
        ctx.update(emitted)
    if feed is not None:
        feed.push(torch.tensor(emitted[held:]), feats[keep][held:], timer)
    ev = head.on_verify(tree.tokens, logits, timer) if head is not None else None  # after extend: warm caches
    rec = StepRecord(step=step, kind="step", accepted=path, emitted=emitted,
                     emitted_draft_p=[float(torch.tensor(tree.logp[i]).exp()) for i in path] + [None],
                     emitted_in_vocab=[in_vocab[i] for i in path] + [in_vocab[-1]],
                     **_margins(target.top2(logits[keep])[1] if top is None else top, target))
    rec.tree = {"tokens": tree.tokens, "parents": tree.parents, "logp": tree.logp, "in_vocab": in_vocab[:-1],
                "head_calls": tree.head_calls, "origin": tree.origin, "held": held}
    _fill_stream(rec, ev, head)
    if ctx is not None and ctx.switch is not None:
        ctx.switch.observe(tree.head_calls > 0, (time.perf_counter() - t0) * 1000,
                           sum(tree.origin[i] == "model" for i in path))
    return rec, bonus, len(keep)


def _fill_stream(rec, ev, head):
    if ev is not None:
        rec.stream = ev.as_trace()
    else:
        rec.stream = {"entered": [], "left": [], "size_s": 0, "active": head.n_active() if head is not None else 0}


def _margins(top2, target) -> dict:
    """top2 [n, 2]: each row's two largest logits. margin: top-1 minus top-2 logit per row; tie_tol: the margin within
    which rounding in the target's logits dtype may flip the greedy choice (stats.tie_tolerance)."""
    eps = torch.finfo(getattr(getattr(target, "head_weight", None), "dtype", torch.float32)).eps
    return {"margin": (top2[:, 0] - top2[:, 1]).tolist(),
            "tie_tol": [tie_tolerance(t, eps) for t in top2[:, 0].tolist()]}


def _pick(logits_row, greedy: int, cfg, gen) -> int:
    if cfg.temperature == 0:
        return greedy
    return int(torch.multinomial(target_probs(logits_row, cfg.temperature, cfg.top_p).cpu(), 1, generator=gen))  # gen: CPU


def _emit(rec, tokens, draft_p, in_vocab, fr_rank, decode, eos_ids, budget):
    """Cut at EOS and at the token budget; fill the per-token fields."""
    tokens = list(tokens)[:budget]
    for i, t in enumerate(tokens):
        if t in eos_ids:
            tokens = tokens[: i + 1]
            rec.finished = True
            break
    n = len(tokens)
    rec.emitted = tokens
    rec.emitted_draft_p = list(draft_p)[:n]
    rec.emitted_in_vocab = list(in_vocab)[:n]
    rec.emitted_fr_rank = [int(fr_rank[t]) for t in tokens] if fr_rank is not None else [-1] * n
    rec.margin = list(rec.margin)[:n]
    rec.tie_tol = list(rec.tie_tol)[:n]
    rec.text = decode(tokens)
