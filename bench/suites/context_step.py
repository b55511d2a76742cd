"""A step's time split: NanoSpec + context against the context alone, where the gap between them goes (conv / qa /
math prompts × --tokens, --rounds rounds interleaved, one process): python -m bench context-step."""
import argparse
from collections import defaultdict

import torch

from bench import harness
from core.config import SpecConfig
from core.pipeline import Pipeline
from core.prompts import load_prompts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench context-step", description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = Pipeline.load()
    ps = [p for p in load_prompts("assets/prompts/speclens_prompts.jsonl") if p.category in ("conv", "qa", "math")][:6]
    ctx_pipe = Pipeline.load(draft="context")
    cfg = SpecConfig(method="nanospec", context="on", max_new_tokens=args.tokens)
    for rnd in range(args.rounds):
        for name in ("nanospec+context", "context"):
            pp = pipe if name != "context" else ctx_pipe
            tot, n, wall, model_steps = defaultdict(float), 0, 0.0, 0
            for q in ps:
                ms, recs = harness.clock(lambda pp=pp, q=q: list(pp.run(q.text, cfg)))
                wall += ms / 1e3
                for r in recs:
                    if r.kind == "step":
                        n += 1
                        for k, v in r.timing_ms.items():
                            tot[k] += v
                        model_steps += any(o == "model" for o in r.tree.get("origin", []))
            print(rnd, name, "steps", n, "model steps", model_steps, "wall", round(wall, 2), "ms/step",
                  round(wall * 1000 / n, 2), {k: round(v / n, 2) for k, v in tot.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
