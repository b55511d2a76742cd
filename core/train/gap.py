"""python -m core.train.gap: an EAGLE head's in-engine first-draft acceptance beside its teacher-forced agreement on the
same tokens, and what separates them.

Per prompt the engine decodes with a chain of one draft (method full, context off): each step's draft d_p for position
p is accepted or not. The answer (prompt + emitted tokens, the target's own greedy text) is then teacher-forced:
  - features f_j from the runtime the engine drafts from (the same runner, one pass over the whole answer), and from
    transformers' model at fp32 and bf16 (the numerics a head trained on transformers' features saw);
  - the head over every entry (f_j, x_{j+1}) at once, causally: its argmax at entry p - 1 is its guess for x_p.
Agreement is counted over the positions the engine drafted (the same tokens) and over every answer position.
Equal engine and runtime-forced figures at the drafted positions mean the engine drafts what the head would say; a
gap between runtime and transformers features is a numerics gap; one between drafted and all positions is the
sample the engine's steps pick."""
import argparse
import json
import sys
from pathlib import Path

import torch

from core.config import SpecConfig
from core.prompts import load_prompts


def engine_drafts(pipe, prompt: str, n: int) -> tuple[list, list]:
    """(answer ids = prompt + emitted, [(position, draft id, accepted)]) of one chain-1 run."""
    ids = pipe.prompt_ids(prompt)
    cfg = SpecConfig(method="full", shape="chain", gamma=1, context="off", max_new_tokens=n)
    seq, drafts = list(ids), []
    for rec in pipe.run(prompt, cfg):
        if rec.kind == "step" and rec.tree["tokens"]:
            drafts.append((len(seq), int(rec.tree["tokens"][0]), bool(rec.accepted)))
        seq += [int(t) for t in rec.emitted]
    return seq, drafts


@torch.no_grad()
def runtime_features(runner, seq: list) -> torch.Tensor:
    """The runner's pre-norm features of every position of seq, in one pass (the cache is reset before and after)."""
    runner.reset()
    _, feats = runner.forward(torch.tensor(seq), torch.arange(len(seq)))
    runner.reset()
    return feats.float()


@torch.no_grad()
def hf_features(model, seq: list) -> torch.Tensor:
    from core.train.data import FeatureHook
    hook = FeatureHook(model)
    model.model(input_ids=torch.tensor([seq]))
    hook.h.remove()
    return hook.take()[0][0].float()


@torch.no_grad()
def forced_guesses(head, W, seq: list, feats: torch.Tensor) -> torch.Tensor:
    """guess[p] for p in 2..len(seq)-1: the head's argmax over W at entry (f_{p-2}, x_{p-1}), every entry at once."""
    dt = head.fc.weight.dtype
    f = head.target_in(feats[:-1].to(dt))[None]
    ids = torch.tensor(seq[1:])[None]
    out, _ = head(f, ids, torch.arange(1, len(seq))[None])
    logits = head.head_in(out[0]).float() @ W.float().T
    guess = torch.full((len(seq),), -1, dtype=torch.long)
    guess[2:] = logits[:-1].argmax(-1)
    return guess


def agreement(guess: torch.Tensor, seq: list, positions: list) -> tuple[int, int]:
    hits = sum(int(guess[p]) == seq[p] for p in positions if p < len(seq))
    return hits, len(positions)


def chain_tau(pipe, prompts: list, n: int, gamma: int = 3) -> dict:
    """tau (tokens per verify step, bonus included) of a chain of `gamma` drafts, context off, over the prompts."""
    from core.trace.stats import summarize
    cfg = SpecConfig(method="full", shape="chain", gamma=gamma, context="off", max_new_tokens=n)
    records = [r for p in prompts for r in pipe.run(p, cfg)]
    return {"hits": 0, "of": 0, "rate": summarize(records)["mean_accept_len"]}


def measure(pipe, prompts: list, n: int, hf_models: dict) -> dict:
    head, W = pipe.drafter.head, pipe.drafter.head_weight
    tally = {}

    def add(name, hits_total):
        h, t = tally.get(name, (0, 0))
        tally[name] = (h + hits_total[0], t + hits_total[1])

    for prompt in prompts:
        seq, drafts = engine_drafts(pipe, prompt, n)
        at = [p for p, _, _ in drafts]
        answer = list(range(len(pipe.prompt_ids(prompt)) + 1, len(seq)))  # the first emitted token has no draft
        add("engine", (sum(a for _, _, a in drafts), len(drafts)))
        add("engine draft = forced guess", (0, 0))
        for name, feats in [("runtime", runtime_features(pipe.target, seq))] + [
                (k, hf_features(m, seq)) for k, m in hf_models.items()]:
            guess = forced_guesses(head, W, seq, feats)
            add(f"forced {name}, drafted positions", agreement(guess, seq, at))
            add(f"forced {name}, every answer position", agreement(guess, seq, answer))
            if name == "runtime":
                add("engine draft = forced guess", (sum(int(guess[p]) == d for p, d, _ in drafts), len(drafts)))
    return {k: {"hits": h, "of": t, "rate": h / t if t else 0.0} for k, (h, t) in tally.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.train.gap", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    p.add_argument("--limit", type=int, default=14)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--hf", default="fp32,bf16", help="transformers dtypes to force features with ('' for none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--head", default="", help="a directory holding eagle.safetensors (default: the shipped head)")
    p.add_argument("--tau", action="store_true", help="also the engine's tau with a chain of 3, context off")
    p.add_argument("--draft-weights", default="model", choices=("model", "int8", "int4"),
                   help="the head's layer weights on the fast runtime (its drafts only: the target's stay exact)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from core.decoding.eagle_io import load_eagle_drafter
    from core.models import load_model
    from core.pipeline import Pipeline, head_dir
    pipe = Pipeline.load(args.model, draft="context")
    head = Path(args.head) if args.head else head_dir(args.model)  # a head of one's own, or the shipped one
    pipe.drafter, pipe.draft_name = load_eagle_drafter(pipe.target, head, "auto", args.draft_weights), "eagle"
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    hf = {f"transformers {k}": load_model(args.model, dtype=dtypes[k])[0] for k in filter(None, args.hf.split(","))}
    prompts = [q.text for q in load_prompts(args.prompts, args.limit)]
    out = measure(pipe, prompts, args.max_new_tokens, hf)
    if args.tau:
        out["tau, chain 3, context off"] = chain_tau(pipe, prompts, args.max_new_tokens)
    out["_setup"] = {"model": args.model, "prompts": args.prompts, "n_prompts": len(prompts),
                     "max_new_tokens": args.max_new_tokens, "runtime": pipe.runtime_note, "dtype": str(pipe.model.dtype),
                     "head": args.head or "shipped", "draft_weights": args.draft_weights}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            if not k.startswith("_"):
                print(f"{k:48s} {v['hits']:5d} / {v['of']:5d} = {v['rate']:.3f}" if v["of"] else f"{k:48s} {v['rate']:.3f}")
        print(out["_setup"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
