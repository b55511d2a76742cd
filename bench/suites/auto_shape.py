"""--shape auto against the fixed choices it picks from, on held-out prompts, interleaved per prompt in one process
(docs/cost.md). Run after `python -m core calibrate --acceptance`:
python -m bench auto-shape [--model M] [--draft D] [--tokens N] [--per-category K] [--rounds R] [--grid]
--grid adds a measured grid search (depth 2-6, top-k 1-4, size 4-16, chains 1-6, context drafting on)."""
import argparse
import dataclasses

import torch

from bench import harness
from core.cost.choose import prediction, resolve_shape
from core.cost.predict import mixes_context, shape_label
from core.config import SpecConfig
from core.prompts import load_prompts, per_category
from core.models import draft_defaults
from core.pipeline import Pipeline
from core.trace.stats import compare_to_ar


def variants(pipe, n: int) -> dict:
    """name -> SpecConfig: plain decoding, the model's measured shape with context on and off, the context alone,
    the cost model's best model shape with context on and off, and auto as resolved."""
    base = SpecConfig(method="nanospec", max_new_tokens=n, **draft_defaults(pipe.model_id)).validate(pipe.vocab_size)
    best, _ = resolve_shape(pipe, dataclasses.replace(base, shape="auto"), allow_context=False,
                           allow_plain=False)
    auto, note = resolve_shape(pipe, dataclasses.replace(base, shape="auto", context="on"))
    print(note)
    out = {"ar": dataclasses.replace(base, method="ar"),
           f"measured shape {shape_label(base)} +context": dataclasses.replace(base, context="on"),
           f"measured shape {shape_label(base)}": dataclasses.replace(base, context="off"),
           "context alone": dataclasses.replace(base, shape="context", context="on"),
           f"best model shape {shape_label(best)}": dataclasses.replace(best, context="off"),
           f"best model shape {shape_label(best)} +context": dataclasses.replace(best, context="on")}
    out[f"auto ({shape_label(auto)}{' +context' if mixes_context(auto) else ''})"] = auto
    return out


GRID = [(d, k, n) for d in (2, 3, 4, 6) for k in (2, 3, 4) for n in (4, 6, 8, 12, 16) if d <= n <= d * k]
CHAINS = (1, 2, 3, 4, 6)


def grid(base: SpecConfig) -> dict:
    """name -> SpecConfig over a grid of trees and chains, with base's context setting."""
    out = {f"grid tree {d}/{k}/{n}": dataclasses.replace(base, shape="tree", depth=d, top_k=k, tree_size=n)
           for d, k, n in GRID}
    return out | {f"grid chain {g}": dataclasses.replace(base, shape="chain", gamma=g) for g in CHAINS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench auto-shape", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--draft", default="auto")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grid", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = Pipeline.load(args.model or "smollm2-135m-instruct", draft=args.draft)
    cfgs, prompts = variants(pipe, args.tokens), per_category(load_prompts(["assets/prompts/heldout.jsonl"]), args.per_category)
    rows = sum(len(pipe.prompt_ids(q.text)) for q in prompts) / len(prompts)
    if args.grid:
        cfgs |= grid(dataclasses.replace(cfgs[next(k for k in cfgs if k.startswith("auto"))], context="on"))
    for c in cfgs.values():  # warm-up
        list(pipe.run(prompts[0].text, dataclasses.replace(c, max_new_tokens=4)))
    tokens, seconds, same = dict.fromkeys(cfgs, 0), dict.fromkeys(cfgs, 0.0), dict.fromkeys(cfgs, 0)
    steps, step_tokens = dict.fromkeys(cfgs, 0), dict.fromkeys(cfgs, 0)
    for _ in range(args.rounds):
        for p in prompts:
            recs = {}
            for name, c in cfgs.items():
                ms, recs[name] = harness.clock(lambda c=c, p=p: list(pipe.run(p.text, c)))
                seconds[name] += ms / 1e3
                tokens[name] += sum(len(r.emitted) for r in recs[name])
                step_tokens[name] += sum(len(r.emitted) for r in recs[name] if r.kind != "prefill")
                steps[name] += sum(r.kind != "prefill" for r in recs[name])
            for name in cfgs:
                same[name] += compare_to_ar(recs[name], recs["ar"])["identical"]
    ar = tokens["ar"] / seconds["ar"]
    print(f"{len(prompts)} held-out prompts x {args.tokens} tokens x {args.rounds} rounds, {args.threads} threads; "
          f"plain decoding {ar:.1f} tok/s")
    print(f"{'variant':<44} {'measured':>9} {'predicted':>9} {'τ':>5} {'τ pred':>6} {'identical':>9}")
    best = max((n for n in cfgs if n.startswith("grid")), key=lambda n: tokens[n] / seconds[n], default=None)
    for name, c in cfgs.items():
        if name == "ar" or (name.startswith("grid") and name != best):
            continue
        p = prediction(pipe, c, rows)  # the whole run's, prefills included, as measured
        pred, tau = p["predicted_speedup"], step_tokens[name] / max(steps[name], 1)
        print(f"{name + (' (best of the grid)' if name == best else ''):<44} {tokens[name] / seconds[name] / ar:8.2f}x "
              f"{pred or 0:8.2f}x {tau:5.2f} {p.get('predicted_tau') or 0:6.2f} {same[name]:>4}/{len(prompts) * args.rounds}")
    ranked = sorted((n for n in cfgs if n.startswith("grid")), key=lambda n: -tokens[n] / seconds[n])
    if ranked:
        print("the grid's five fastest: " + ", ".join(f"{n[5:]} {tokens[n] / seconds[n] / ar:.2f}x" for n in ranked[:5]))
    if best:
        print(f"identical to plain decoding over the whole grid: {sum(same[n] for n in cfgs if n.startswith('grid'))}"
              f"/{sum(n.startswith('grid') for n in cfgs) * len(prompts) * args.rounds}")


if __name__ == "__main__":
    raise SystemExit(main())
