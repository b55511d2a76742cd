"""Predicted vs measured speedup over plain decoding, whole runs (prefills included), held-out prompts (the first of
each category, or --per-category of each), interleaved per prompt in one process (docs/cost.md). Run after `python -m core calibrate`:
python -m bench predicted-speedup [--model ALIAS --draft ALIAS] [--n 64] [--per-category 2]
Each prediction twice: from the calibration as cached, and anchored to a probe of this process (core/cost/probe.py: probe) taken
before the runs; the probe is taken again after them, to show how far the machine drifted within the process."""
import argparse
import time

import torch

from core.cost.choose import SHAPE_KEYS, prediction
from core.config import SpecConfig
from core.cost.probe import probe
from core.prompts import load_prompts, per_category
from core.models import draft_defaults
from core.pipeline import Pipeline

TREE = {"shape": "tree", "depth": 3, "top_k": 2, "tree_size": 6}
VARIANTS = (("ar", {}, "off"), ("nanospec", {"shape": "chain", "gamma": 1}, "on"), ("nanospec", {"shape": "context"}, "on"),
            ("nanospec", TREE, "on"), ("nanospec", TREE, "off"), ("full", TREE, "off"),
            ("nanospec", {"shape": "chain", "gamma": 3}, "off"))


def config(pipe, v, n) -> SpecConfig:
    """The variant over the model's own head settings (the pair's W_max, preview, ...), as calibrated and predicted."""
    method, shape, context = v
    base = {k: x for k, x in draft_defaults(pipe.model_id).items() if k not in SHAPE_KEYS + ("context",)}
    return SpecConfig(method=method, max_new_tokens=n, context=context, **(base | shape)).validate(pipe.vocab_size)


def name(v) -> str:
    method, shape, context = v
    s = shape.get("shape", "")
    s = {"chain": f"chain {shape.get('gamma')}", "tree": f"tree {shape.get('depth')}/{shape.get('top_k')}/"
         f"{shape.get('tree_size')}"}.get(s, s)
    return f"{method} {s}" + (" + context" if context == "on" and s != "context" else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench predicted-speedup", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--draft", default="auto")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--per-category", type=int, default=1, help="held-out prompts per category (2: all 14)")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    pipe = Pipeline.load(args.model, draft=args.draft) if args.model else Pipeline.load()
    prompts = per_category(load_prompts(["assets/prompts/heldout.jsonl"]), args.per_category)
    rows = sum(len(pipe.prompt_ids(q.text)) for q in prompts) / len(prompts)
    for v in VARIANTS:  # warm-up
        list(pipe.run(prompts[0].text, config(pipe, v, 4)))
    with torch.no_grad():
        now = probe(pipe)
    tokens, seconds = {name(v): 0 for v in VARIANTS}, {name(v): 0.0 for v in VARIANTS}
    steps = {name(v): [0, 0, 0.0, 0.0] for v in VARIANTS}  # steps after the prefill: tokens, timed ms, wall ms
    for q in prompts:
        for v in VARIANTS:
            t0, recs, wall = time.perf_counter(), [], []
            for r in pipe.run(q.text, config(pipe, v, args.n)):
                recs.append(r)
                wall.append(time.perf_counter())
            seconds[name(v)] += wall[-1] - t0
            tokens[name(v)] += sum(len(r.emitted) for r in recs)
            s = steps[name(v)]
            for r in recs[1:]:
                s[0], s[1], s[2] = s[0] + 1, s[1] + len(r.emitted), s[2] + sum(r.timing_ms.values())
            s[3] += 1e3 * (wall[-1] - wall[0])
    with torch.no_grad():
        after = probe(pipe)
    print("probe before / after the runs (ms): target t(1) {:.1f} / {:.1f}, t({}) {:.1f} / {:.1f}; drafter w=1 {:.1f} / "
          "{:.1f}".format(now["target"]["ms"][0], after["target"]["ms"][0], now["target"]["rows"][1],
                          now["target"]["ms"][1], after["target"]["ms"][1], now["draft"]["ms"][0], after["draft"]["ms"][0]))
    ar = tokens[name(VARIANTS[0])] / seconds[name(VARIANTS[0])]
    n_ar, _, _, wall_ar = steps[name(VARIANTS[0])]
    print(f"{pipe.model_id}: {len(prompts)} prompts of {rows:.0f} tokens on average, {args.n} new; AR {ar:.1f} tok/s, "
          f"{wall_ar / max(n_ar, 1):.1f} ms a step (record to record)")
    errs = {"cached": [], "anchored": []}
    for v in VARIANTS[1:]:
        measured = tokens[name(v)] / seconds[name(v)] / ar
        pred, held = prediction(pipe, config(pipe, v, args.n), rows), prediction(pipe, config(pipe, v, args.n), rows, now)
        if pred["predicted_speedup"] is None:
            print(f"{name(v)}: measured {measured:.2f}x, no prediction ({pred['prediction_note']})")
            continue
        errs["cached"].append(pred["predicted_speedup"] / measured - 1)
        errs["anchored"].append(held["predicted_speedup"] / measured - 1)
        n, toks, _, ms = steps[name(v)]
        print(f"{name(v):<28} measured {measured:.2f}x; predicted {pred['predicted_speedup']:.2f}x "
              f"({errs['cached'][-1]:+.1%}), anchored {held['predicted_speedup']:.2f}x ({errs['anchored'][-1]:+.1%}); "
              f"τ {toks / max(n, 1):.2f} (predicted {pred['predicted_tau']:.2f}), {ms / max(n, 1):.1f} ms a step "
              f"(predicted {pred['predicted_step_ms']:.1f}, anchored {held['predicted_step_ms']:.1f})")
    if errs["cached"]:
        for k, e in errs.items():
            print(f"{k}: largest error {max(map(abs, e)):.1%}, {sum(abs(x) <= 0.1 for x in e)} of {len(e)} within 10%")
        print(f"the AR step predicted {pred['predicted_ar_ms']:.1f} ms, anchored {held['predicted_ar_ms']:.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
