"""--accept: the acceptance length τ of the model's full draft head restricted to each map, in our engine.

Each map becomes FR-Spec's static head (core.decoding.heads.build_head("frspec", W, cfg, ids): the draft LM head's
rows W[ids]) and runs through the engine's generate() exactly as Pipeline.run runs a frspec head, only with the
map's ids in place of the shipped table's. Beside them: the full head (all V rows), NanoSpec's dynamic I_t and
plain greedy decoding, whose tokens every run must equal (lossless). Context drafting is off: the head alone
drafts. τ = tokens per decode step (accepted drafts + 1), over all prompts.
"""
import sys

import torch

from core.config import SpecConfig
from core.prompts import CATEGORIES


def first_per_category(prompts, n: int) -> list:
    """n prompts, one per category in turn (the first of each, then the second, …)."""
    by_cat = [[p for p in prompts if p.category == c] for c in CATEGORIES]
    order = [group[i] for i in range(max(map(len, by_cat), default=0)) for group in by_cat if i < len(group)]
    return order[:n]


def engine_config(model_id, method: str, max_new_tokens: int) -> SpecConfig:
    """The model's measured draft shape, context drafting off (the head alone drafts), greedy."""
    from core.models import draft_defaults
    keys = set(SpecConfig.__dataclass_fields__)
    shape = {k: v for k, v in draft_defaults(model_id).items() if k in keys}
    return SpecConfig(**{**shape, "method": method, "max_new_tokens": max_new_tokens, "context": "off"}).validate()


def run_static(pipe, prompt_ids: list, cfg: SpecConfig, ids: torch.Tensor) -> list:
    """StepRecords of one generation with the draft head restricted to `ids` (Pipeline.run's path, frspec head)."""
    from core.decoding.engine import generate  # the engine and head builder Pipeline.run uses
    from core.decoding.heads import build_head
    cfg.validate(pipe.vocab_size, pipe.drafter.d)
    head = build_head("frspec", pipe.drafter.head_weight, cfg, ids, None, cfg.backend)
    with pipe.lock:
        return list(generate(pipe.target, pipe.drafter, head, prompt_ids, cfg, pipe.eos_ids(), pipe.fr_rank,
                             pipe.tokenizer.decode))


def tau(runs: list) -> float:
    """Tokens per decode step over all runs (the prefill record left out)."""
    steps = [r for records in runs for r in records if r.kind != "prefill"]
    return sum(len(r.emitted) for r in steps) / max(len(steps), 1)


def tokens(records) -> list:
    return [t for r in records for t in r.emitted]


def acceptance(model_id, cols: dict, prompts, n_prompts: int, max_new_tokens: int) -> dict:
    """{"prompts", "tokens", "rows": [{name, size, tau, vs_full, identical}]} with the full head, each map column
    and NanoSpec; identical = every run's tokens equal plain greedy decoding's."""
    from core.pipeline import Pipeline
    pipe = Pipeline.load(model_id)
    if pipe.drafter is None or pipe.draft_name == "context":
        return {"error": f"{model_id} has no draft head to restrict"}
    chosen = first_per_category(prompts, n_prompts)
    cfg = lambda method: engine_config(model_id, method, max_new_tokens)
    ids_of = [pipe.prompt_ids(p.text) for p in chosen]
    ar = [list(pipe.run(p.text, cfg("ar"))) for p in chosen]
    runs = {"full head": [list(pipe.run(p.text, cfg("full"))) for p in chosen]}
    for name, ids in cols.items():
        print(f"  accept: {name}", file=sys.stderr)
        runs[name] = [run_static(pipe, pid, cfg("frspec"), ids) for pid in ids_of]
    runs["NanoSpec I_t"] = [list(pipe.run(p.text, cfg("nanospec"))) for p in chosen]
    full = tau(runs["full head"])
    sizes = {name: len(ids) for name, ids in cols.items()} | {"full head": pipe.vocab_size}
    rows = [{"name": name, "size": sizes.get(name), "tau": tau(rs), "vs_full": tau(rs) / full if full else 0.0,
             "identical": all(tokens(a) == tokens(r) for a, r in zip(ar, rs))} for name, rs in runs.items()]
    return {"prompts": len(chosen), "tokens": sum(len(tokens(r)) for r in ar), "draft": pipe.draft_name, "rows": rows}


def print_accept(acc: dict) -> None:
    if "error" in acc:
        print(f"accept: {acc['error']}")
        return
    print(f"\nacceptance: {acc['prompts']} prompts, {acc['tokens']} greedy tokens, draft {acc['draft']} "
          "(context drafting off)")
    print("| draft vocabulary | ids | τ | τ / full head | output = greedy |\n|---|---|---|---|---|")
    for r in acc["rows"]:
        size = f"{r['size']:,}" if r["size"] else "dynamic"
        print(f"| {r['name']} | {size} | {r['tau']:.3f} | {r['vs_full']:.3f} | {'yes' if r['identical'] else 'NO'} |")
