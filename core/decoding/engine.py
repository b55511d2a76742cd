"""The decoding engine: a generator that yields one StepRecord per step.

    prefill → [_spec_step: draft (tree + context branches) → verify → accept → commit (the drafter keeps its
               accepted drafts) → extend the drafters with the rest → update stream → record_step]*  (speculative)
    prefill → [_ar_step: one target step]*                                                    (method "ar")

A run's parts travel together as a Decoder (target, head, feed, ctx, cfg, gen, timer).

A drafter of None with a context drafter is pure prompt lookup: the tree holds context branches only,
and a step with no match verifies the root alone (one plain step).
"""
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

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


@dataclass
class Decoder:
    """One run's parts: the target, the draft head, the engine options (SpecConfig), the sampling generator and the
    section timer; spec: whether the method drafts. prefill sets the model drafter's feed and the context drafter
    (None where the method has none)."""
    target: Runner
    head: Head | None
    cfg: object
    gen: torch.Generator
    timer: Timer
    spec: bool
    feed: DraftFeed | None = None
    ctx: ContextDrafter | None = None


@torch.no_grad()
def generate(target: Runner, drafter: Drafter | None, head: Head | None, prompt_ids, cfg, eos_ids=(), fr_rank=None,
             decode=None, should_stop=lambda: False, switch_prior: SwitchPrior | None = None):
    """Yield StepRecords. drafter/head: None for method "ar"; drafter None (and head None) with a speculative
    method: context drafting alone. switch_prior: where the model drafts beside the context, the calibrated costs
    its ModelSwitch starts from."""
    spec = cfg.method != "ar" and (drafter is not None or head is not None or cfg.context == "on")
    d = Decoder(target, head, cfg, torch.Generator().manual_seed(cfg.seed), Timer(cfg.timing, target.device), spec)
    emit = partial(_emit, fr_rank=fr_rank, decode=decode or (lambda ids: ""), eos_ids=eos_ids)
    t0 = time.perf_counter()
    rec, root, root_pos = prefill(d, drafter, prompt_ids, switch_prior)
    budget = cfg.max_new_tokens
    while True:
        emit(rec, budget)
        rec.timing_ms = d.timer.take((time.perf_counter() - t0) * 1000)
        budget -= len(rec.emitted)
        if _is_last(rec, budget, should_stop):
            break
        yield rec
        t0 = time.perf_counter()
        rec, root, moved = (_spec_step if d.spec else _ar_step)(d, root, root_pos, rec.step + 1)
        root_pos += moved
    yield rec


def prefill(d: Decoder, drafter: Drafter | None, prompt_ids, switch_prior=None) -> tuple[StepRecord, int, int]:
    """The prompt's pass: the target's cache and its first token (the root), the head's stream, and the drafters
    (d.ctx, d.feed) where the method drafts. Returns (the prefill record, the root, the root's position)."""
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long).view(-1)
    last, pre, feats = _prompt_pass(d, prompt)
    best, top = d.target.top2(last)
    root = _pick(last[0], best[0], d.cfg, d.gen)
    rec = StepRecord(step=0, kind="prefill", emitted=[root], emitted_draft_p=[None], emitted_in_vocab=[True],
                     **_margins(top, d.target))
    if d.spec:
        d.ctx = _context_drafter(d.cfg, drafter, prompt.tolist() + [root], switch_prior)
    if d.head is not None:
        pre = d.head.top_pre(last) if pre is None else torch.cat([pre, d.head.top_pre(last)])
        ev = d.head.on_prefill(prompt, pre, d.timer)  # bookkeeping: "other"
        _fill_stream(rec, ev, d.head)
    if drafter is not None and d.spec:
        with d.timer("draft_backbone"):
            d.feed = DraftFeed(drafter, drafter.prefill(prompt, root, feats), lazy=d.ctx is not None)
    return rec, root, prompt.numel()


def _prompt_pass(d: Decoder, prompt):
    """The target over the prompt [n], committed: (the root's logits [1, V], one row alone whatever the method; the
    top-K_pre ids of the other rows' logits [(n - 1) * K_pre] where the head reads them, else None; features [n, d])."""
    with d.timer("verify"):
        d.target.reset()
        hidden, feats = d.target.forward(prompt, torch.arange(prompt.numel()), None)
        d.target.commit(torch.arange(prompt.numel()))
        last = d.target.logits(hidden[-1:])
        top = prefill_top(d.target, d.head, hidden[:-1]) if d.head is not None and d.head.needs_prefill_logits \
            and len(prompt) > 1 else None
    return last, top, feats


PRE_ROWS = 16  # prompt rows per logits product for S⁽⁰⁾: a whole [n, V] costs its page faults and a copy, ~40% of
               # the product itself at n = 100 on a 152k vocabulary (AMD Zen 5, 2026-12-07)


def prefill_top(target, head, hidden) -> torch.Tensor:
    """head.top_pre of the target's logits over prompt rows hidden [n, d] -> [n * K_pre] ids, PRE_ROWS rows a product:
    the [n, V] logits are never whole."""
    return torch.cat([head.top_pre(target.logits(h)) for h in hidden.split(PRE_ROWS)])


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


def _ar_step(d: Decoder, root, root_pos, step) -> tuple[StepRecord, int, int]:
    """One plain step: (its record, the target's next token, 1 position)."""
    with d.timer("verify"):
        hidden, _ = d.target.forward(torch.tensor([root]), torch.tensor([root_pos]), None)
        d.target.commit(torch.tensor([0]))
        logits = d.target.logits(hidden)
    best, top = d.target.top2(logits)
    tok = _pick(logits[0], best[0], d.cfg, d.gen)
    rec = StepRecord(step=step, kind="ar", emitted=[tok], emitted_draft_p=[None], emitted_in_vocab=[True],
                     **_margins(top, d.target))
    return rec, tok, 1


def _spec_step(d: Decoder, root, root_pos, step) -> tuple[StepRecord, int, int]:
    """draft → verify → accept → commit: (its record, the bonus token (the next root), the positions committed)."""
    t0 = time.perf_counter()
    tree = _draft(d, root_pos)
    logits, feats = _verify(d, tree, root, root_pos)  # [1 + k, V], [1 + k, d]
    path, bonus, top = _accept(d, tree, logits)
    keep = torch.tensor([0] + [i + 1 for i in path])
    held = _commit(d, tree, path, keep)
    in_vocab = _in_vocab(d.head, tree.tokens + [bonus])  # [k + 1]: before on_verify moves I_t
    emitted = [tree.tokens[i] for i in path] + [bonus]
    _extend(d, emitted, feats, keep, held)
    ev = d.head.on_verify(tree.tokens, logits, d.timer) if d.head is not None else None  # after extend: warm caches
    top = d.target.top2(logits[keep])[1] if top is None else top
    rec = record_step(step, tree, path, emitted, in_vocab, held, _margins(top, d.target))
    _fill_stream(rec, ev, d.head)
    _observe(d.ctx, tree, path, t0)
    return rec, bonus, len(keep)


def _draft(d: Decoder, root_pos) -> Tree:
    """The model's tree, with the context branches merged in when context drafting is on; a step where the
    context suffices (ContextDrafter.use_model) skips the model."""
    branches = d.ctx.propose(d.cfg.context_len) if d.ctx is not None else []
    tree = Tree()
    if d.feed is not None and (d.ctx is None or d.ctx.use_model(branches)):
        tree = draft_tree(d.feed.drafter, d.head, d.feed.flush(d.timer), root_pos, d.cfg, d.gen, d.timer,
                          prune=d.ctx is None)
    if d.ctx is None:
        return tree
    size = len(tree) if not tree or d.cfg.temperature > 0 else min(len(tree), tree_shape(d.cfg)[2])
    return merge_context(tree, branches, size, d.cfg.context_len, d.cfg.temperature > 0)


def _verify(d: Decoder, tree: Tree, root, root_pos):
    """The target over the root and the tree's k nodes, pending: (logits [1 + k, V], features [1 + k, d])."""
    ids, pos, mask = verify_inputs(tree, root, root_pos)
    with d.timer("verify"):
        hidden, feats = d.target.forward(ids, pos, mask)
        logits = d.target.logits(hidden)
    return logits, feats


def _accept(d: Decoder, tree: Tree, logits) -> tuple:
    """(accepted node indices, bonus token, the two largest logits of each row read [a + 1, 2]; None when sampling)."""
    if d.cfg.temperature == 0:
        return accept_greedy(tree, logits, d.target.top2)
    return (*accept_sample(tree, logits, d.cfg.temperature, d.cfg.top_p, d.gen), None)


def _commit(d: Decoder, tree: Tree, path, keep) -> int:
    """The target keeps the root and the accepted path (`keep`); the model drafter keeps the accepted drafts it holds
    and drops the rest. Returns how many it held."""
    with d.timer("verify"):
        d.target.commit(keep)
    if d.feed is None or not tree.head_calls:
        return 0
    with d.timer("draft_backbone"):
        return d.feed.drafter.rollback(held_rows(tree, path))


def _in_vocab(head: Head | None, tokens) -> list:
    """Each token's membership in the I_t the draft used at this step (all True without a head)."""
    return head.in_vocab(tokens) if head is not None else [True] * len(tokens)


def _extend(d: Decoder, emitted, feats, keep, held) -> None:
    """The drafters learn the emitted tokens: the context drafter all of them, the model drafter those it does not
    hold, with the target's features of their rows (feats [1 + k, d], keep [a + 1])."""
    if d.ctx is not None:
        d.ctx.update(emitted)
    if d.feed is not None:
        d.feed.push(torch.tensor(emitted[held:]), feats[keep][held:], d.timer)


def record_step(step, tree: Tree, path, emitted, in_vocab, held, margins) -> StepRecord:
    """The trace record of a speculative step: the tree (in_vocab [k + 1]: its nodes, then the bonus), the accepted
    path, the emitted tokens with their draft probabilities (None for the bonus), membership in I_t and margins."""
    return StepRecord(step=step, kind="step", accepted=path, emitted=emitted,
                      emitted_draft_p=[float(torch.tensor(tree.logp[i]).exp()) for i in path] + [None],
                      emitted_in_vocab=[in_vocab[i] for i in path] + [in_vocab[-1]], **margins,
                      tree={"tokens": tree.tokens, "parents": tree.parents, "logp": tree.logp, "in_vocab": in_vocab[:-1],
                            "head_calls": tree.head_calls, "origin": tree.origin, "held": held})


def _observe(ctx: ContextDrafter | None, tree: Tree, path, t0) -> None:
    """Greedy context drafting's ModelSwitch learns the step's time and how many model drafts it accepted."""
    if ctx is not None and ctx.switch is not None:
        ctx.switch.observe(tree.head_calls > 0, (time.perf_counter() - t0) * 1000,
                           sum(tree.origin[i] == "model" for i in path))


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


def _emit(rec, budget, fr_rank, decode, eos_ids):
    """Cut the record's tokens at EOS and at the token budget; fill the per-token fields."""
    tokens = list(rec.emitted)[:budget]
    for i, t in enumerate(tokens):
        if t in eos_ids:
            tokens = tokens[: i + 1]
            rec.finished = True
            break
    n = len(tokens)
    rec.emitted = tokens
    rec.emitted_draft_p = list(rec.emitted_draft_p)[:n]
    rec.emitted_in_vocab = list(rec.emitted_in_vocab)[:n]
    rec.emitted_fr_rank = [int(fr_rank[t]) for t in tokens] if fr_rank is not None else [-1] * n
    rec.margin = list(rec.margin)[:n]
    rec.tie_tol = list(rec.tie_tol)[:n]
    rec.text = decode(tokens)
