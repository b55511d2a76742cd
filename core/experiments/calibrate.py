"""python -m core calibrate: what one speculative step costs on this machine, and whether speculation pays here.

Costs (per machine × model pair × dtype × runtime × threads, cached under the cache root; another CPU, model,
dtype, runtime, thread count or SPECLENS_CPU_ISA is another file): the target's pass over n = 1 .. --rows rows at
each --contexts length, the drafter's pass over w = 1 .. --width rows, each head's call over w rows, and the
per-step bookkeeping of each method (one short engine run each).
Acceptance (per model pair, machine-independent; --acceptance measures it on the shipped prompts, never the held-out
ones, and writes assets/acceptance/): a[d][r] for each head, from engine runs with a wide tree.
From the two, core/decoding/cost.py predicts each method's speedup at its shape, its break-even τ and its best shape.
"""
import argparse
import hashlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from core.config import SpecConfig
from core.decoding import cost
from core.decoding.draft import DraftState
from core.decoding.tree import tree_shape
from core.errors import SpecError
from core.experiments.args import add_engine_args, config_from, pipeline_from
from core.paths import ASSETS, cache_root, write_atomic
from core.trace.stats import acceptance_counts, acceptance_rates

HEADS = ("full", "frspec", "nanospec", "slimspec", "nanoslim")
WIDE = {"shape": "tree", "depth": 6, "top_k": 4, "tree_size": 24}  # the acceptance runs' tree: a[d][r] to depth 6, rank 4
CPU_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma", "asimd", "sve")


# ---------------------------------------------------------------- where a calibration belongs

def machine() -> dict:
    """The CPU, the features the kernels dispatch on, the torch threads and the ISA cap in force."""
    flags, name = set(), platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")) and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": name, "features": [f for f in CPU_FLAGS if f in flags], "threads": torch.get_num_threads(),
            "isa_cap": os.environ.get("SPECLENS_CPU_ISA", ""), "cores": os.cpu_count()}


def calibration_key(pipe) -> dict:
    return {"machine": machine(), "model": pipe.model_id, "draft": pipe.draft_name, "runtime": pipe.runtime_name,
            "runtime_note": getattr(pipe, "runtime_note", ""), "dtype": str(pipe.model.dtype).removeprefix("torch.")}


def costs_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "calibration" / f"{key['model'].replace('/', '--')}-{digest}.json"


def acceptance_path(pipe) -> Path:
    from core.models import model_alias
    name = model_alias(pipe.model_id) or str(pipe.model_id).replace("/", "--")
    return ASSETS / "acceptance" / f"{name}__{pipe.draft_name.replace('/', '--')}.json"


# ---------------------------------------------------------------- measuring costs

def ms(fn, reps: int) -> float:
    """Median milliseconds of fn() over reps calls, after one warm-up call."""
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def prefilled(pipe, n_ctx: int, ids: list):
    """The target holding n_ctx committed tokens; returns (prompt ids, their logits [n, V], their features)."""
    prompt = torch.tensor((ids * (n_ctx // max(len(ids), 1) + 1))[:n_ctx])
    pipe.target.reset()
    hidden, feats = pipe.target.forward(prompt, torch.arange(n_ctx), None)
    pipe.target.commit(torch.arange(n_ctx))
    return prompt, pipe.target.logits(hidden), feats


def verify_curve(pipe, n_ctx: int, rows: int, reps: int, ids: list) -> list:
    """t_verify(n), n = 1 .. rows: the target's pass over n new rows after n_ctx committed ones, logits included."""
    prompt, _, _ = prefilled(pipe, n_ctx, ids)
    drop = torch.zeros(0, dtype=torch.long)

    def verify(n):
        h, _ = pipe.target.forward(prompt[:n], torch.arange(n_ctx, n_ctx + n), None)
        pipe.target.logits(h)
        pipe.target.commit(drop)
    return [ms(lambda: verify(n), reps) for n in range(1, rows + 1)]


def draft_curves(pipe, n_ctx: int, width: int, reps: int, ids: list, methods) -> tuple:
    """(t_backbone(w), {method: t_head(w)}), w = 1 .. width, after a prefill of n_ctx tokens."""
    prompt, logits, feats = prefilled(pipe, n_ctx, ids)
    state = pipe.drafter.prefill(prompt, int(logits[-1].argmax()), feats)

    def expand(w):
        rows = torch.zeros(w, dtype=torch.long)
        parent = DraftState(state.head_in[-1:][rows], None if state.state is None else state.state[-1:][rows])
        pipe.drafter.expand(parent, prompt[:w], torch.full((w,), n_ctx), torch.eye(w, dtype=torch.bool))
        pipe.drafter.rollback()
    backbone = [ms(lambda: expand(w), reps) for w in range(1, width + 1)]
    heads = {}
    for m in methods:
        head = pipe.build_head(config_for(pipe, m))
        head.on_prefill(prompt, logits)
        h = state.head_in[-1:]
        heads[m] = [ms(lambda: head.score(h.expand(w, -1).contiguous()), reps) for w in range(1, width + 1)]
    return backbone, heads


def config_for(pipe, method: str, **over) -> SpecConfig:
    from core.models import draft_defaults
    return SpecConfig(method=method, **(draft_defaults(pipe.model_id) | over)).validate(pipe.vocab_size)


def step_overhead(pipe, method: str, prompt: str, n_new: int) -> float:
    """Mean per-step milliseconds the parts above leave out (the engine's `other` and `gather` timers)."""
    recs = [r for r in pipe.run(prompt, config_for(pipe, method, max_new_tokens=n_new, context="off")) if r.kind == "step"]
    return statistics.mean(r.timing_ms["other"] + r.timing_ms["gather"] for r in recs) if recs else 0.0


def measure_costs(pipe, args, progress=print) -> dict:
    from core.experiments.prompts import example_prompts
    prompt = example_prompts()[0].text
    ids = pipe.prompt_ids(prompt)
    contexts = [int(c) for c in args.contexts.split(",")]
    verify = {}
    for c in contexts:
        progress(f"target: {args.rows} row counts after {c} tokens")
        verify[c] = verify_curve(pipe, c, args.rows, args.reps, ids)
    progress(f"draft: backbone and {len(args.methods)} heads over 1..{args.width} rows")
    backbone, heads = draft_curves(pipe, contexts[0], args.width, args.reps, ids, args.methods)
    other = {}
    for m in args.methods:
        progress(f"bookkeeping per step: {m}")
        other[m] = step_overhead(pipe, m, prompt, 24)
    mean_verify = [statistics.mean(v[i] for v in verify.values()) for i in range(args.rows)]
    return {"verify": mean_verify, "verify_by_context": {str(c): v for c, v in verify.items()}, "backbone": backbone,
            "head": heads, "other": other}


def costs_of(data: dict, method: str) -> cost.Costs:
    return cost.Costs(verify=data["verify"], backbone=data["backbone"], head=data["head"], other=data["other"][method])


# ---------------------------------------------------------------- measuring acceptance

def measure_acceptance(pipe, args, progress=print) -> dict:
    """a[d][r] per head from engine runs with the WIDE tree on the shipped prompts (--limit per category)."""
    from core.experiments.prompts import load_prompts
    seen, prompts = {}, []
    for p in load_prompts():
        seen[p.category] = seen.get(p.category, 0) + 1
        if seen[p.category] <= args.limit:
            prompts.append(p)
    out = {}
    for m in args.methods:
        progress(f"acceptance: {m} on {len(prompts)} prompts")
        recs = [r for p in prompts for r in pipe.run(p.text, config_for(pipe, m, max_new_tokens=args.max_new_tokens,
                                                                        context="off", **WIDE))]
        counts = acceptance_counts(recs, WIDE["depth"], WIDE["top_k"])
        out[m] = {"a": acceptance_rates(counts, floor=8), **counts}
    return {"model": pipe.model_id, "draft": pipe.draft_name, "tree": WIDE, "prompts": [p.id for p in prompts],
            "max_new_tokens": args.max_new_tokens, "heads": out}


# ---------------------------------------------------------------- the verdict per method

def verdicts(pipe, costs: dict, acc: dict) -> list:
    """Per method: the default shape's predicted speedup and break-even τ, and the best shape of the grid."""
    rows = []
    for m, a in acc["heads"].items():
        if m not in costs["head"]:
            continue
        c, ac = costs_of(costs, m), cost.Acceptance(a["a"])
        d = config_for(pipe, m)
        s = cost.Shape(*tree_shape(d))
        best, best_x = cost.best_shape(c, ac, m)
        tau = 1 + cost.expected_accepted(ac, s)
        rows.append({"method": m, "shape": shape_name(s), "predicted_tau": tau,
                     "break_even_tau": cost.break_even_tau(c, m, s),
                     "predicted_speedup": cost.predicted_speedup(c, ac, m, s), "best_shape": shape_name(best),
                     "best_speedup": best_x, "t_step_ms": cost.step_ms(c, m, s, tau), "t_ar_ms": c.at(c.verify, 1)})
    return rows


def shape_name(s: cost.Shape) -> str:
    return f"chain {s.depth}" if s.chain else f"tree {s.depth}/{s.top_k}/{s.size}"


def load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cached(pipe) -> tuple:
    """(costs, acceptance) saved for this pipeline on this machine, each None where missing."""
    return load_json(costs_path(calibration_key(pipe))), load_json(acceptance_path(pipe))


def prediction(pipe, cfg: SpecConfig) -> dict:
    """The cost model's numbers for one run's config, from the cached calibration (no measuring here)."""
    costs, acc = cached(pipe)
    if costs is None or acc is None or cfg.method not in acc["heads"] or cfg.method not in costs["head"]:
        missing = "python -m core calibrate" + ("" if acc else " --acceptance")
        return {"predicted_speedup": None, "prediction_note": f"no calibration for this machine and model ({missing})"}
    c, ac = costs_of(costs, cfg.method), cost.Acceptance(acc["heads"][cfg.method]["a"])
    s = cost.Shape(*tree_shape(cfg))
    return {"predicted_speedup": round(cost.predicted_speedup(c, ac, cfg.method, s), 3),
            "predicted_tau": round(1 + cost.expected_accepted(ac, s), 3),
            "break_even_tau": round(cost.break_even_tau(c, cfg.method, s), 3), "prediction_note": ""}


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
            costs = {"key": key, "date": time.strftime("%Y-%m-%d"), "load_avg": round(load, 2), **measure_costs(pipe, args)}
            write_atomic(path, json.dumps(costs, indent=1))
        acc = measure_acceptance(pipe, args) if args.acceptance else load_json(acceptance_path(pipe))
    if args.acceptance:
        write_atomic(acceptance_path(pipe), json.dumps(acc, indent=1))
    print(f"costs: {path} ({time.perf_counter() - t0:.0f} s; {key['machine']['cpu']}, "
          f"{'/'.join(key['machine']['features'])}, {key['machine']['threads']} threads, {key['runtime_note']})")
    print(f"target step t(1) {costs['verify'][0]:.1f} ms, t(8) {costs['verify'][7]:.1f} ms, t(16) {costs['verify'][15]:.1f} ms; "
          f"drafter pass w=1 {costs['backbone'][0]:.1f} ms, w={len(costs['backbone'])} {costs['backbone'][-1]:.1f} ms")
    if acc is None:
        print(f"no acceptance table at {acceptance_path(pipe)}: run with --acceptance for the verdicts")
        return 0
    print("method     shape        τ pred  break-even τ  speedup pred  best shape     best speedup")
    for r in verdicts(pipe, costs, acc):
        print(f"{r['method']:<10} {r['shape']:<12} {r['predicted_tau']:6.2f}  {r['break_even_tau']:12.2f}  "
              f"{r['predicted_speedup']:12.2f}  {r['best_shape']:<14} {r['best_speedup']:12.2f}")
    return 0
