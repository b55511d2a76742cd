"""A/B in one process: a draft model that keeps its accepted drafts (ModelDrafter.rollback(keep)) against one that drops
them and takes every emitted token in again, interleaved per prompt, NanoSpec chains on the held-out prompts (one of
each category). Prints τ, each timer's ms per step and ms per token for both. Run after the pair is cached:
python -m bench keep-drafts [--model ALIAS --draft ALIAS] [--gammas 2 3] [--n 64]"""
import argparse

import torch

from core.config import SpecConfig
from core.decoding.draft import ModelDrafter
from core.prompts import load_prompts, per_category
from core.models import draft_defaults
from core.pipeline import Pipeline

KEEPS = ModelDrafter.rollback


def takes_all_in(self, keep=()) -> int:
    return KEEPS(self, ())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench keep-drafts", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--gammas", type=int, nargs="+", default=[2, 3])
    p.add_argument("--n", type=int, default=64)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    pipe = Pipeline.load(args.model, draft=args.draft)
    prompts = per_category(load_prompts("assets/prompts/heldout.jsonl"), 1)
    for gamma in args.gammas:
        cfg = SpecConfig(method="nanospec", max_new_tokens=args.n,
                         **(draft_defaults(pipe.model_id) | {"shape": "chain", "gamma": gamma})).validate()
        list(pipe.run(prompts[0].text, cfg))  # first-call costs outside the timings
        tot = {"keeps": {}, "takes all in": {}}
        for prompt in prompts:
            for mode, rollback in (("keeps", KEEPS), ("takes all in", takes_all_in)):
                ModelDrafter.rollback = rollback
                for r in [r for r in pipe.run(prompt.text, cfg) if r.kind == "step"]:
                    t = tot[mode]
                    t["steps"], t["tokens"] = t.get("steps", 0) + 1, t.get("tokens", 0) + len(r.emitted)
                    for k, v in r.timing_ms.items():
                        t[k] = t.get(k, 0.0) + v
        ModelDrafter.rollback = KEEPS
        for mode, t in tot.items():
            steps, tokens = t.pop("steps"), t.pop("tokens")
            print(f"chain {gamma}, {mode:<12} τ {tokens / steps:.2f}  " + "  ".join(
                f"{k} {v / steps:.2f}" for k, v in t.items()) + f"  ms/token {sum(t.values()) / tokens:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
