"""Timed passes, as a calibration times them, and the probe of the moment: the target's and the drafter's passes
now, against which core/cost/predict.py: anchored re-reads a cached calibration (docs/cost.md: on a VM whose phase
drifts between processes, the curves as cached miss by more than the probe's few passes cost)."""
import statistics
import time
import weakref

import torch

from core.cost.store import cached
from core.decoding.draft import DraftState


def ms_rounds(fns: list, reps: int, rounds: int = 2) -> list:
    """Milliseconds of each fn: per round, one warm-up call and then the median of reps calls in a row (timed after
    itself, as an engine's steps repeat: a 1-row pass right after a 32-row one measured 6.9 ms, after other 1-row
    passes 5.3), the least of the rounds' medians (a burst of noise on a shared machine lifts one round's point)."""
    out = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            fn()
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1000)
            out[i].append(statistics.median(times))
    return [min(t) for t in out]


def ms(fn, reps: int) -> float:
    """Median milliseconds of fn() over reps calls, after one warm-up call."""
    return ms_rounds([fn], reps, rounds=1)[0]


def prefilled(pipe, n_ctx: int, ids: list):
    """The target holding n_ctx committed tokens; returns (prompt ids, their logits [n, V], their features)."""
    prompt = torch.tensor((ids * (n_ctx // max(len(ids), 1) + 1))[:n_ctx])
    pipe.target.reset()
    hidden, feats = pipe.target.forward(prompt, torch.arange(n_ctx), None)
    pipe.target.commit(torch.arange(n_ctx))
    return prompt, pipe.target.logits(hidden), feats


def verify_pass(pipe, n_ctx: int, ids: list):
    """verify(n): the target's pass over n new rows after n_ctx committed ones, logits included, left uncommitted."""
    prompt, _, _ = prefilled(pipe, n_ctx, ids)
    drop = torch.zeros(0, dtype=torch.long)

    def verify(n):
        h, _ = pipe.target.forward(prompt[:n], torch.arange(n_ctx, n_ctx + n), None)
        pipe.target.logits(h)
        pipe.target.commit(drop)
    return verify




def draft_pass(pipe, n_ctx: int, ids: list) -> tuple:
    """(expand(w): the drafter's pass over w rows after its prefill of n_ctx tokens, rolled back; the prompt, its
    logits, the drafter's state)."""
    prompt, logits, feats = prefilled(pipe, n_ctx, ids)
    state = pipe.drafter.prefill(prompt, int(logits[-1].argmax()), feats)

    def expand(w):
        rows = torch.zeros(w, dtype=torch.long)
        parent = DraftState(state.head_in[-1:][rows], None if state.state is None else state.state[-1:][rows])
        pipe.drafter.expand(parent, prompt[:w], torch.full((w,), n_ctx), torch.eye(w, dtype=torch.bool))
        pipe.drafter.rollback()
    return expand, prompt, logits, state




PROBE = {"n_ctx": 64, "rows": 9, "width": 4}  # the probe's context, wide target pass (the tree 4/2/8 and its root), wide draft


def probe(pipe, reps: int = 5, n_ctx: int = PROBE["n_ctx"]) -> dict:
    """This moment's target pass over 1 and PROBE rows and drafter pass over 1 and PROBE width rows, timed as the
    calibration's curves (ms_rounds, the widest first), for predict.anchored: ~1.5 s on the 1.5B pair."""
    from core.prompts import example_prompts
    ids = pipe.prompt_ids(example_prompts()[0].text)
    k, w = PROBE["rows"], PROBE["width"]
    verify = verify_pass(pipe, n_ctx, ids)
    target = ms_rounds([lambda: verify(k), lambda: verify(1)], reps)[::-1]
    out = {"n_ctx": n_ctx, "target": {"rows": [1, k], "ms": target}}
    if pipe.drafter is not None and hasattr(pipe.drafter, "expand"):
        expand = draft_pass(pipe, n_ctx, ids)[0]
        out["draft"] = {"rows": [1, w], "ms": ms_rounds([lambda: expand(1), lambda: expand(w)], reps)}
    pipe.target.reset()
    return out


PROBE_MAX_AGE_S = 600.0  # a long-lived process (the app) probes a pipeline at most this often
_PROBES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # pipeline -> (monotonic time, its last probe)


def anchor_probe(pipe, max_age_s: float = 0.0) -> dict | None:
    """A probe (above) where this machine has a calibration for pipe, for predict.anchored (None where it has none):
    the predictions read at this moment (docs/cost.md: on a VM whose phase drifts between processes, 11 of 12 within
    ±10% against 9 of 12 from the calibration as cached). max_age_s: the pipeline's last probe where it is younger
    (the app: a probe costs ~0.3 s on SmolLM2, ~1.5 s on the 1.5B pair)."""
    if pipe.drafter is None or not cached(pipe)[0]:
        return None
    last = _PROBES.get(pipe)
    if last is not None and time.monotonic() - last[0] < max_age_s:
        return last[1]
    with torch.no_grad():
        now = probe(pipe)
    _PROBES[pipe] = (time.monotonic(), now)
    return now

