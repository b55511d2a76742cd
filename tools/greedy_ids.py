"""Greedy token ids of every method on the shipped prompts, to check that a change leaves outputs byte-identical.

    python -m tools.greedy_ids --tokens 32 [--all] > after.json      # run from a checkout's root
    python -m tools.greedy_ids --compare before.json after.json      # runs that differ, and spec != AR runs

Default model, its default draft, runtime and dtype (Pipeline.load()); one thread. Without --all: one example
prompt per category (core.prompts.example_prompts), with it every prompt of assets/prompts/speclens_prompts.jsonl.
"""
import argparse
import json
from pathlib import Path


def collect(tokens: int, every: bool) -> dict:
    import torch

    from core.config import METHODS, SpecConfig
    from core.pipeline import Pipeline
    from core.prompts import example_prompts, load_prompts
    torch.set_num_threads(1)
    pipe = Pipeline.load()
    ids = {}
    for p in load_prompts() if every else example_prompts():
        for m in METHODS:
            records = pipe.run(p.text, SpecConfig(method=m, max_new_tokens=tokens))
            ids[f"{p.id}/{m}"] = [t for r in records for t in r.emitted]
    return {"model": pipe.model_id, "draft": pipe.draft_name, "runtime": pipe.runtime_note, "ids": ids}


def compare(before: dict, after: dict) -> dict:
    a, b = before["ids"], after["ids"]
    ar = {k.rsplit("/", 1)[0]: v for k, v in b.items() if k.endswith("/ar")}
    return {"runs": len(b), "changed": sorted(k for k in b if a.get(k) != b[k]),
            "spec_not_ar": sorted(k for k, v in b.items() if v != ar[k.rsplit("/", 1)[0]])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.greedy_ids", description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--all", action="store_true", help="every shipped prompt, not one per category")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(f).read_text()) for f in args.compare)
        out = compare(before, after)
        print(json.dumps(out, indent=1))
        return 1 if out["changed"] else 0
    print(json.dumps(collect(args.tokens, args.all)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
