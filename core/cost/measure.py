"""python -m core calibrate: what one speculative step costs on this machine, and whether speculation pays here.

Costs (per machine × model pair × dtype × runtime × threads, cached under the cache root; another CPU, model,
dtype, runtime, thread count or SPECLENS_CPU_ISA is another file): the target's pass over n = 1 .. --rows rows at
each --contexts length, the drafter's pass over w = 1 .. --width rows, each head's call over w rows, and the
per-step bookkeeping of each method (one short engine run each).
Acceptance (per model pair, machine-independent; --acceptance measures it on the shipped prompts, never the held-out
ones, and writes assets/acceptance/): a[d][r] for each head, from engine runs with a wide tree.
From the two, core/cost/model.py predicts each method's speedup at its shape, its break-even τ and its best shape.
"""
import argparse
import json
import os
import statistics
import time

import torch

from core.args import add_engine_args, config_from, pipeline_from
from core.config import SpecConfig
from core.cost import model as cost
from core.cost.choose import best_choice, chosen_arithmetic, pipeline_math, record_arithmetic, recorded_arithmetics
from core.cost.predict import shape_of, verdict
from core.cost.probe import draft_pass, ms, ms_rounds, prefilled, verify_pass
from core.cost.store import CONTEXT, CONTEXT_ONE, MIXED, acceptance_path, calibration_key, costs_path, load_json
from core.decoding.engine import prefill_top
from core.errors import SpecError
from core.paths import write_atomic
from core.runtime.config import FastConfig
from core.runtime.weights import codes_math, maths_here
from core.trace.stats import acceptance_counts, acceptance_rates

HEADS = ("full", "frspec", "nanospec", "slimspec", "nanoslim")
WIDE = {"shape": "tree", "depth": 6, "top_k": 4, "tree_size": 24}  # the acceptance runs' tree: a[d][r] to depth 6, rank 4


# ---------------------------------------------------------------- measuring costs

def curve_rows(rows: int) -> list:
    """The row counts verify_curve times: each up to 17 (a pass of up to 16 rows, the kinks of q8_mm's zmm pairing,
    the first split into two passes), then every 4th and the last; past 17 the passes grow in even steps."""
    return [n for n in range(1, rows + 1) if n <= 17 or n % 4 == 0 or n == rows]


def verify_curve(pipe, n_ctx: int, rows: int, reps: int, ids: list) -> list:
    """t_verify(n), n = 1 .. rows: the target's pass over n new rows after n_ctx committed ones, logits included,
    timed at curve_rows (linear between them) from the most rows down: a 1-row pass takes ~5 passes to settle after a
    32-row one (SmolLM2: 6.0 ms falling to 4.0), so timed first or after the widest it read 40% above the engine's
    plain steps."""
    verify, ns = verify_pass(pipe, n_ctx, ids), curve_rows(rows)
    timed = ms_rounds([lambda n=n: verify(n) for n in reversed(ns)], reps)[::-1]
    return [cost.interpolate(ns, timed, n) for n in range(1, rows + 1)]


def draft_curves(pipe, n_ctx: int, width: int, reps: int, ids: list, methods) -> tuple:
    """(t_backbone(w), {method: t_head(w)}), w = 1 .. width, after a prefill of n_ctx tokens."""
    expand, prompt, logits, state = draft_pass(pipe, n_ctx, ids)
    backbone = [ms(lambda w=w: expand(w), reps) for w in range(1, width + 1)]
    heads = {}
    for m in methods:
        head = pipe.build_head(config_for(pipe, m))
        head.on_prefill(prompt, head.top_pre(logits))
        h = state.head_in[-1:]
        heads[m] = [ms(lambda head=head, h=h, w=w: head.score(h.expand(w, -1).contiguous()), reps) for w in range(1, width + 1)]
    return backbone, heads


def config_for(pipe, method: str, **over) -> SpecConfig:
    from core.models import draft_defaults
    return SpecConfig(method=method, **(draft_defaults(pipe.model_id) | over)).validate(pipe.vocab_size)


STEP_PROMPTS = ("conv", "code")  # the categories whose first shipped prompts time the steps beside the context
MIXED_WITH = "nanospec"  # the head whose run beside the context measures every head's mixed steps' bookkeeping
DRAFT_TIMERS = ("draft_backbone", "lm_head")  # the engine's timers of the parts the draft curves stand for


def record_steps(pipe, method: str, prompts, n_new: int, **over) -> list:
    """Engine runs' steps as timed (one run of n_new tokens per prompt), one (wall ms, draft timers ms, rows, context,
    intake, drafted, verify timer ms) per step: the wall time from one record to the next, the drafter's and head's
    timers, the rows verified, the tokens committed before it, the tokens the drafter took in first (those the step
    before it emitted, less the accepted drafts it kept), whether the model drafted, and the engine's timer of its
    target pass."""
    cfg = config_for(pipe, method, max_new_tokens=n_new, **({"context": "off"} | over))
    steps = []
    for prompt in [prompts] if isinstance(prompts, str) else prompts:
        ctx, t, intake = len(pipe.prompt_ids(prompt)), time.perf_counter(), 1
        for r in pipe.run(prompt, cfg):
            now = time.perf_counter()
            if r.kind in ("step", "ar"):
                rows = 1 + (len(r.tree["tokens"]) if r.kind == "step" and r.tree else 0)
                drafted = r.kind == "step" and bool(r.tree and r.tree.get("head_calls"))
                timers = sum(r.timing_ms[k] for k in DRAFT_TIMERS)
                steps.append((1e3 * (now - t), timers, rows, ctx, intake, drafted, r.timing_ms["verify"]))
            held = (r.tree or {}).get("held", 0) if r.kind == "step" else 0  # accepted drafts the drafter kept
            ctx, intake, t = ctx + len(r.emitted), len(r.emitted) - held, now
    return steps


def step_rest(steps: list, draft_ms=None) -> dict:
    """What the curves leave out of recorded steps: the mean per-step milliseconds by kind of step, None where there
    was none: "model" (the model drafted), "one" (1 row verified, nothing drafted) and "continued" (the context's rows
    alone). Each step's wall time less its draft timers and the engine's timer of its own target pass, timed in the
    same moment: so the context lookup, the tree's bookkeeping, the acceptance and the record count, and a step's
    pass is the curve's at its rows for every kind alike, plain decoding's included. Against the curve instead, the
    VM's phase at the curve's moment went into one kind and not another (AMD EPYC, 2026-12-05: a calibration put the
    pair's plain step at 33.5 ms over a t(1) of 25.4, 26.3 measured after it; an AMX Xeon, SmolLM2: a mixed run's
    1-row steps 2.1 ms over the curve, 1.1 over their own passes). A continued step costs more than a 1-row one
    beyond its rows (SmolLM2, 2026-12-03: ~2.2 against ~0.9 ms), so a run's mix of the two must not set both. With
    draft_ms(intake) (the curves' draft of a step after one that emitted `intake` tokens): "draft_scale", the engine's
    draft timers over it (the drafter and the head run between target passes in the engine, in a row of their own in
    the curves)."""
    rest, draft = {"model": [], "one": [], "continued": []}, [0.0, 0.0]
    for wall, timers, rows, _ctx, intake, drafted, own in steps:
        kind = "model" if drafted else "one" if rows == 1 else "continued"
        rest[kind].append(wall - timers - own)
        if drafted and draft_ms is not None:
            draft[0], draft[1] = draft[0] + timers, draft[1] + draft_ms(intake)
    out = {k: max(statistics.mean(x), 0.0) if x else None for k, x in rest.items()}
    return out | {"draft_scale": draft[0] / draft[1] if draft[1] > 0 else None}


def engine_steps(pipe, method: str, prompts, n_new: int, draft_ms=None, **over) -> dict:
    """step_rest of the steps of fresh engine runs."""
    return step_rest(record_steps(pipe, method, prompts, n_new, **over), draft_ms)


def beside_context(got: dict, fallback: dict | None = None) -> dict:
    """The bookkeeping of a context run's steps without the model: {CONTEXT: continued, CONTEXT_ONE: 1 row}, a kind
    the run lacked taken from fallback (else the other kind, else 0)."""
    fallback = fallback or {}
    one, cont = got["one"], got["continued"]
    one = one if one is not None else fallback.get(CONTEXT_ONE, cont)
    cont = cont if cont is not None else fallback.get(CONTEXT, one)
    return {CONTEXT: cont or 0.0, CONTEXT_ONE: one or 0.0}


PREFILL_AT = (16, 64, 160)  # prompt lengths of the prefill curves


def prefill_curves(pipe, reps: int, ids: list) -> dict:
    """{"rows": PREFILL_AT, "target": [ms], "rows_logits": [ms], "draft": [ms]}: the target's pass over a prompt of P
    rows with the last row's logits, the logits of the other rows (what a NanoSpec head's S⁽⁰⁾ reads besides), and the
    drafter's prefill of it: the parts of a whole run that plain decoding and speculation pay once (the last two:
    speculation alone)."""
    target, rows, draft = [], [], []
    head = pipe.build_head(config_for(pipe, "nanospec"))  # its top_pre: S⁽⁰⁾'s ids, as the engine's prefill reads them
    for n in PREFILL_AT:
        prompt, logits, feats = prefilled(pipe, n, ids)

        def target_pass(prompt=prompt, n=n):  # as the engine's prefill: the pass, its commit, the root's logits
            pipe.target.reset()
            h, _ = pipe.target.forward(prompt, torch.arange(n), None)
            pipe.target.commit(torch.arange(n))
            pipe.target.logits(h[-1:])
            return h
        target.append(ms(target_pass, reps))
        h = target_pass()
        rows.append(ms(lambda h=h: prefill_top(pipe.target, head, h[:-1]), reps))
        root = int(logits[-1].argmax())
        draft.append(ms(lambda prompt=prompt, root=root, feats=feats: pipe.drafter.prefill(prompt, root, feats), reps))
    return {"rows": list(PREFILL_AT), "target": target, "rows_logits": rows, "draft": draft}


def direct(fn, *args):
    return fn(*args)


def engine_runs(pipe, methods, runs: list, progress=print, run=direct) -> dict:
    """The recorded steps of each run the bookkeeping is measured from, each kind after a 4-token warm-up run."""
    head = MIXED_WITH if MIXED_WITH in methods else methods[0]
    kinds = {m: (m, 24, {}) for m in methods} | {CONTEXT: ("nanospec", 32, {"shape": CONTEXT, "context": "on"}),
                                                  "ar": ("ar", 32, {}), MIXED: (head, 32, {"context": "on"})}
    out = {}
    for kind, (m, n, over) in kinds.items():
        progress(f"bookkeeping per step: {kind}")
        run(lambda m=m, over=over: record_steps(pipe, m, runs[0], 4, **over))
        out[kind] = run(lambda m=m, n=n, over=over: record_steps(pipe, m, runs, n, **over))
    return out


def measure_costs(pipe, args, progress=print, run=direct) -> dict:
    """Every cost of the cost model. run(fn, *args) makes each measurement (the app passes its engine thread's call,
    so a visitor's run waits for one curve, not the whole calibration). The engine runs come first: timed after the
    curves, the pair's NanoSpec steps read ~2.4 ms more than in a fresh process (2026-12-04), before them as there."""
    from core.prompts import example_prompts
    examples = example_prompts()
    prompt = examples[0].text
    ids = pipe.prompt_ids(prompt)
    contexts = [int(c) for c in args.contexts.split(",")]
    recorded = engine_runs(pipe, args.methods, [p.text for p in examples if p.category in STEP_PROMPTS], progress, run)
    verify = {}
    for c in contexts:
        progress(f"target: {args.rows} row counts after {c} tokens")
        verify[c] = run(verify_curve, pipe, c, args.rows, args.reps, ids)
    progress(f"draft: backbone and {len(args.methods)} heads over 1..{args.width} rows")
    backbone, heads = run(draft_curves, pipe, contexts[0], args.width, args.reps, ids, args.methods)
    progress(f"prefill: prompts of {', '.join(map(str, PREFILL_AT))} tokens")
    prefill = run(prefill_curves, pipe, args.reps, ids)
    other, scale = {}, {}
    for m in args.methods:
        c, s = cost.Costs(verify=[], backbone=backbone, head=heads), shape_of(config_for(pipe, m))
        got = step_rest(recorded[m], lambda tau, c=c, m=m, s=s: cost.draft_ms(c, m, s, tau))
        other[m], scale[m] = got["model"] or 0.0, got["draft_scale"]
    other |= beside_context(step_rest(recorded[CONTEXT]))
    other["ar"] = step_rest(recorded["ar"])["one"] or 0.0
    head = MIXED_WITH if MIXED_WITH in other else args.methods[0]
    got = step_rest(recorded[MIXED])
    other[MIXED] = {"model": 0.0 if got["model"] is None else got["model"] - other[head]} | beside_context(got, other)
    mean_verify = [statistics.mean(v[i] for v in verify.values()) for i in range(args.rows)]
    return {"verify": mean_verify, "verify_by_context": {str(c): v for c, v in verify.items()}, "backbone": backbone,
            "head": heads, "draft_scale": scale, "other": other, "prefill": prefill,
            "drafter_keeps": bool(getattr(pipe.drafter, "keeps_drafts", False))}


# ---------------------------------------------------------------- measuring acceptance

def measure_acceptance(pipe, args, progress=print) -> dict:
    """a[d][r] per head from engine runs with the WIDE tree on the shipped prompts (--limit per category)."""
    from core.prompts import load_prompts, per_category
    prompts = per_category(load_prompts(), args.limit)
    out = {}
    for m in args.methods:
        progress(f"acceptance: {m} on {len(prompts)} prompts")
        recs = [r for p in prompts for r in pipe.run(p.text, config_for(pipe, m, max_new_tokens=args.max_new_tokens,
                                                                        context="off", **WIDE))]
        counts = acceptance_counts(recs, WIDE["depth"], WIDE["top_k"])
        out[m] = {"a": acceptance_rates(counts, floor=8), **counts}
    progress(f"acceptance: the context alone on {len(prompts)} prompts")
    return {"model": pipe.model_id, "draft": pipe.draft_name, "tree": WIDE, "prompts": [p.id for p in prompts],
            "max_new_tokens": args.max_new_tokens, "heads": out, CONTEXT: context_acceptance(pipe, prompts, args)}


def context_acceptance(pipe, prompts, args) -> dict:
    """Drafting from the context alone: tokens per step τ and verify rows per step (the tree's nodes + the root)."""
    cfg = config_for(pipe, "nanospec", max_new_tokens=args.max_new_tokens, shape=CONTEXT, context="on")
    steps = [r for p in prompts for r in pipe.run(p.text, cfg) if r.kind == "step"]
    n = max(len(steps), 1)
    return {"tau": sum(len(r.emitted) for r in steps) / n, "rows": sum(len(r.tree["tokens"]) + 1 for r in steps) / n,
            "steps": len(steps), "drafted": sum(bool(r.tree["tokens"]) for r in steps) / n}


# ---------------------------------------------------------------- the verdict per method

def verdicts(pipe, costs: dict, acc: dict) -> list:
    """Per method: the default shape's Verdict and the best choice of the grid (context alone included)."""
    rows = []
    for m in acc["heads"]:
        d = config_for(pipe, m)
        v = verdict(costs, acc, m, shape_of(d), d.context == "on")
        if v is None:
            continue
        _, best = best_choice(costs, acc, m, d.context == "on")
        rows.append(v.as_dict() | {"best_shape": best.shape, "best_speedup": round(best.speedup, 3)})
    return rows


def save_costs(pipe, args, progress=print, run=direct) -> dict:
    """measure_costs, stamped with where and when, written to this machine's calibration file."""
    key, load = calibration_key(pipe), os.getloadavg()[0]
    costs = {"key": key, "date": time.strftime("%Y-%m-%d"), "load_avg": round(load, 2),
             **measure_costs(pipe, args, progress, run)}
    write_atomic(costs_path(key), json.dumps(costs, indent=1))
    record_arithmetic(pipe, costs, load_json(acceptance_path(pipe)))
    return costs


def defaults(**over) -> argparse.Namespace:
    """The command's default settings (what the app's background calibration measures)."""
    args = parse([])
    for k, v in over.items():
        setattr(args, k, v)
    return args


def print_arithmetic(pipe, costs: dict, acc: dict | None) -> None:
    """Records this arithmetic's speeds (choose.record_arithmetic) and says what auto does with them."""
    path = record_arithmetic(pipe, costs, acc)
    if path is None:
        return
    got, math = recorded_arithmetics(path), pipeline_math(pipe)
    print(f"GGUF arithmetic {math}: plain {got[math]['plain_tok_s']:.1f} tok/s, best {got[math]['best_tok_s']:.1f} "
          f"({got[math]['best']}), predicted")
    other = {"bf16": "int8", "int8": "bf16"}[math]
    if other in got:
        rule = codes_math(FastConfig(), pipe.model.dtype)
        print(chosen_arithmetic(pipe.model_id, pipe.draft_name, str(pipe.model.dtype).removeprefix("torch."), rule)[1])
    elif math == "bf16" and other in maths_here(pipe.model.dtype):
        print(f"{other} also runs here: SPECLENS_GGUF_MATH={other} python -m core calibrate (same options) lets auto "
              f"pick the faster")


# ---------------------------------------------------------------- CLI

def parse(argv):
    p = argparse.ArgumentParser(prog="python -m core calibrate", description=__doc__.splitlines()[0])
    add_engine_args(p)
    p.add_argument("--methods", default=",".join(HEADS), help="heads to calibrate (comma list)")
    p.add_argument("--rows", type=int, default=32, help="target rows measured: n = 1 .. ROWS")
    p.add_argument("--width", type=int, default=8, help="draft rows measured: w = 1 .. WIDTH")
    p.add_argument("--contexts", default="64,512", help="context lengths of the target's curve (comma list)")
    p.add_argument("--reps", type=int, default=5, help="timed calls per point (the median counts)")
    p.add_argument("--acceptance", action="store_true", help="also measure a[d][r] per head and write assets/acceptance/")
    p.add_argument("--limit", type=int, default=2, help="--acceptance: shipped prompts per category")
    p.add_argument("--force", action="store_true", help="measure the costs again even where they are cached")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in HEADS]
    if bad or not args.methods:
        raise SpecError(f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(HEADS)}")
    if args.rows < 2 or args.width < 2:
        raise SpecError("--rows and --width must be at least 2")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config_from(args, "nanospec")  # the engine options are checked before anything loads
    pipe = pipeline_from(args)
    if pipe.drafter is None:
        raise SpecError(f"draft {args.draft!r} has no model drafter to calibrate")
    key, t0 = calibration_key(pipe), time.perf_counter()
    path = costs_path(key)
    costs = None if args.force else load_json(path)
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"warning: load average {load:.1f} on {os.cpu_count()} cores: the timings measure the contention too")
    with torch.no_grad():
        if costs is None:
            costs = save_costs(pipe, args)
        acc = measure_acceptance(pipe, args) if args.acceptance else load_json(acceptance_path(pipe))
    if args.acceptance:
        write_atomic(acceptance_path(pipe), json.dumps(acc, indent=1))
    print_arithmetic(pipe, costs, acc)
    print(f"costs: {path} ({time.perf_counter() - t0:.0f} s; {key['machine']['cpu']}, "
          f"{'/'.join(key['machine']['features'])}, {key['machine']['threads']} threads, {key['runtime_note']})")
    print(f"target step t(1) {costs['verify'][0]:.1f} ms, t(8) {costs['verify'][7]:.1f} ms, t(16) {costs['verify'][15]:.1f} ms; "
          f"drafter pass w=1 {costs['backbone'][0]:.1f} ms, w={len(costs['backbone'])} {costs['backbone'][-1]:.1f} ms")
    if acc is None:
        print(f"no acceptance table at {acceptance_path(pipe)}: run with --acceptance for the verdicts")
        return 0
    print("method     shape                   τ pred  break-even τ  speedup pred  best choice             best speedup"
          "  ceiling")
    for r in verdicts(pipe, costs, acc):
        ceiling = f"{r['ceiling']:9.2f}" if r.get("ceiling") is not None else "        —"
        print(f"{r['method']:<10} {r['shape']:<22} {r['tau']:7.2f}  {r['break_even_tau']:12.2f}  "
              f"{r['speedup']:12.2f}  {r['best_shape']:<22} {r['best_speedup']:12.2f}{ceiling}")
    print("ceiling: step for step, a draft the target always accepts (the most any acceptance gains at these costs)")
    return 0
