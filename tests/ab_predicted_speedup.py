"""Predicted vs measured speedup over plain decoding (SmolLM2, held-out prompts), interleaved per prompt in one process
(docs/cost.md). Run after `python -m core calibrate`: PYTHONPATH=. python tests/ab_predicted_speedup.py"""
import time

import torch

from core.config import SpecConfig
from core.decoding import cost
from core.experiments import calibrate
from core.experiments.prompts import load_prompts
from core.pipeline import Pipeline

SHAPES = (cost.Shape(3, 2, 6), cost.Shape(2, 4, 5), cost.Shape(2, 1, 2))
VARIANTS = [("ar", None)] + [(m, s) for m in ("full", "nanospec") for s in SHAPES]


def first_per_category(path="assets/prompts/heldout.jsonl") -> list:
    seen, out = set(), []
    for p in load_prompts([path]):
        if p.category not in seen:
            seen.add(p.category)
            out.append(p)
    return out


def config(pipe, method, shape, n) -> SpecConfig:
    return SpecConfig(method=method, max_new_tokens=n, context="off",
                      **(shape.config() if shape else {})).validate(pipe.vocab_size)


def main() -> None:
    torch.set_num_threads(2)
    pipe = Pipeline.load()
    costs, acc = calibrate.cached(pipe)
    prompts = first_per_category()
    for m, s in VARIANTS:  # warm-up
        list(pipe.run(prompts[0].text, config(pipe, m, s, 4)))
    tokens, seconds = {v: 0 for v in VARIANTS}, {v: 0.0 for v in VARIANTS}
    for p in prompts:
        for v in VARIANTS:
            t0 = time.perf_counter()
            tokens[v] += sum(len(r.emitted) for r in pipe.run(p.text, config(pipe, *v, 64)))
            seconds[v] += time.perf_counter() - t0
    ar = tokens[VARIANTS[0]] / seconds[VARIANTS[0]]
    print(f"AR {ar:.1f} tok/s")
    for m, s in VARIANTS[1:]:
        measured = tokens[(m, s)] / seconds[(m, s)] / ar
        predicted = cost.predicted_speedup(calibrate.costs_of(costs, m), cost.Acceptance(acc["heads"][m]["a"]), m, s)
        print(f"{m} {s.depth}/{s.top_k}/{s.size}: predicted {predicted:.2f}x, measured {measured:.2f}x "
              f"({predicted / measured - 1:+.0%})")


if __name__ == "__main__":
    main()
