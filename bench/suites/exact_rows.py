"""A/B in one process: plain greedy decoding (method ar, default dtype) with the exact row padding vs without
(core/runtime's row_pad), rounds alternating the order: python -m bench exact-rows [--tokens N]."""
import argparse

import torch

from core.config import SpecConfig
from core.pipeline import Pipeline
from core.prompts import example_prompts


def main(argv=None) -> int:
    import core.runtime.weights as rt
    p = argparse.ArgumentParser(prog="python -m bench exact-rows", description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    pipe = Pipeline.load()
    print("dtype", pipe.model.dtype, pipe.runtime_note)
    real = rt.row_pad
    cfg = SpecConfig(method="ar", max_new_tokens=args.tokens)
    prompts = example_prompts()
    tot = {"padded": [0, 0.0], "unpadded": [0, 0.0]}
    try:
        for rnd in range(args.rounds):
            for name in (("padded", "unpadded") if rnd % 2 == 0 else ("unpadded", "padded")):
                rt.row_pad = real if name == "padded" else (lambda *a: 1)
                for q in prompts:
                    steps = [r for r in pipe.run(q.text, cfg) if r.kind == "ar"]  # each step's own timers
                    tot[name][0] += len(steps)
                    tot[name][1] += sum(sum(r.timing_ms.values()) for r in steps)
    finally:
        rt.row_pad = real
    for k, (n, ms) in tot.items():
        print(k, "steps", n, "ms/step", round(ms / n, 3))
    print("padded/unpadded step time",
          round((tot["padded"][1] / tot["padded"][0]) / (tot["unpadded"][1] / tot["unpadded"][0]), 4))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
