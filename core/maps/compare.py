"""compare: coverage of each map per prompt category, beside FR-Spec's shipped table at the same size and
NanoSpec's dynamic vocabulary I_t; with --accept, the acceptance length of each map (core/maps/accept.py).

Coverage = the fraction of tokens that lie in the map, on one of two token sets:
    outputs  the target's own greedy tokens: each prompt (chat template) runs through the engine with method
             nanospec (lossless: these are the target's greedy tokens); the decode steps' tokens count (the first
             token, from the prefill, is left out: no draft proposes it). NanoSpec's column: the step's I_t held it.
    prompts  the tokenized prompt texts (no chat template, no generation, no model weights): fast, and the fallback
             when the model cannot load. NanoSpec's column, teacher-forced: token x_j is covered when it lies among
             the last W_max entries of the stream x_0, c_0, x_1, c_1, … up to position j-1; c_i = top-K_pre of the
             target's logits at i with --candidates (one forward per prompt), else nothing (the text alone).
A map is measured as an engine serves it: i + d2t[i] for an EAGLE-3 map (a broken d2t shows its cost), draft row i
-> target id i for a checkpoint without d2t, and ids outside the model's vocabulary left out.
"""
import sys
import time
from collections import deque
from pathlib import Path

import torch

from core.config import SpecConfig
from core.errors import SpecError
from core.maps.accept import engine_config
from core.maps.check import d2t_fault, hot_ids, t2d_ids
from core.maps.formats import read_path
from core.maps.model import ModelFacts, load_facts, ranked_map
from core.prompts import CATEGORIES, load_prompts


def served_ids(m, f: ModelFacts) -> tuple[torch.Tensor, list]:
    """(sorted unique ids an engine serves from map m, notes on what was left out)."""
    ids, fault = hot_ids(m), d2t_fault(m, f)
    notes = [f"d2t {fault.replace('_', ' ')}: measured as the ids it serves, with the full head's rows; an EAGLE-3 "
             "head's own row i was trained for the id t2d names, so served it proposes the wrong token"] if fault else []
    if ids is None and m.ids is None and m.d2t is None and m.head_rows:
        ids = torch.arange(m.head_rows)
        notes.append("no d2t: served as draft row i -> target id i")
    if ids is None:
        ids = t2d_ids(m, f)
    if ids is None:
        raise SpecError(f"{m.name}: no ids to measure (python -m core maps check names why)")
    inside = ids[(ids >= 0) & (ids < f.vocab_size)]
    if len(inside) < len(ids):
        notes.append(f"{len(ids) - len(inside)} ids outside the vocabulary left out")
    return torch.unique(inside), notes


def map_columns(paths, f: ModelFacts) -> tuple[dict, list]:
    """({column name: ids}, notes): each file, then FR-Spec's shipped table at each file's size."""
    cols, notes = {}, []
    for path in paths:
        ids, why = served_ids(read_path(path), f)
        name = f"{Path(path).name} ({len(ids):,})"
        cols[name] = ids
        notes += [f"{name}: {w}" for w in why]
    if f.ranks is None:
        notes.append(f"no shipped FR-Spec table for {f.name}: no FR-Spec column")
        return cols, notes
    for k in sorted({len(ids) for ids in list(cols.values())}):
        cols[f"FR-Spec shipped ({k:,})"] = ranked_map(f.ranks, k, f.special_ids)
    return cols, notes


# ---------------------------------------------------------------- token sets

def stream_coverage(tokens: list, candidates: list, w_max: int) -> tuple[list, list]:
    """([bool], [|I_j|]) per position j >= 1: whether x_j is among the last w_max entries of the stream
    x_0, c_0, x_1, c_1, …, x_{j-1}, c_{j-1} (c_i = candidate ids at position i; NanoSpec's suffix window,
    teacher-forced), and how many unique ids those entries hold."""
    window, counts, flags, sizes = deque(), {}, [], []
    for j, t in enumerate(tokens):
        if j:
            flags.append(t in counts)
            sizes.append(len(counts))
        for x in [t, *candidates[j]]:
            window.append(x)
            counts[x] = counts.get(x, 0) + 1
            if len(window) > w_max:
                old = window.popleft()
                counts[old] -= 1
                if not counts[old]:
                    del counts[old]
    return flags, sizes


@torch.no_grad()
def prompt_tokens(prompts, facts: ModelFacts, cfg: SpecConfig, model=None) -> list:
    """[(category, tokens [n], in_I [n] bools, mean |I|)] per prompt: the tokenized text, teacher-forced I_j."""
    out = []
    for p in prompts:
        ids = facts.tokenizer(p.text, add_special_tokens=False)["input_ids"]
        if len(ids) < 2:
            continue
        cands = [[] for _ in ids]
        if model is not None and cfg.k_pre:
            logits = model(torch.tensor([ids], device=model.device)).logits[0]
            cands = logits.topk(cfg.k_pre, dim=-1).indices.cpu().tolist()
        flags, sizes = stream_coverage(ids, cands, cfg.w_max)
        out.append((p.category, torch.tensor(ids[1:]), flags, sum(sizes) / len(sizes)))
    return out


def output_tokens(prompts, pipe, cfg: SpecConfig) -> list:
    """[(category, tokens, in_I_t, mean |I_t|)] per prompt: the target's greedy tokens of the decode steps."""
    out = []
    for i, p in enumerate(prompts):
        records = [r for r in pipe.run(p.text, cfg) if r.kind == "step"]
        tokens = [t for r in records for t in r.emitted]
        flags = [bool(v) for r in records for v in r.emitted_in_vocab]
        mean_i = sum(r.stream["active"] for r in records) / max(len(records), 1)
        out.append((p.category, torch.tensor(tokens, dtype=torch.long), flags, mean_i))
        print(f"\r  {i + 1}/{len(prompts)} prompts", end="", file=sys.stderr)
    print(file=sys.stderr)
    return out


# ---------------------------------------------------------------- tables

def coverage_rows(runs: list, cols: dict) -> list:
    """[{category, prompts, tokens, coverage: {column: fraction}}] per category present, then "all"."""
    rows = []
    for cat in [c for c in CATEGORIES if any(r[0] == c for r in runs)] + ["all"]:
        group = [r for r in runs if cat in ("all", r[0])]
        tokens = torch.cat([r[1] for r in group]) if group else torch.zeros(0, dtype=torch.long)
        flags = [v for r in group for v in r[2]]
        cov = {name: float(torch.isin(tokens, ids).float().mean()) if len(tokens) else 0.0 for name, ids in cols.items()}
        cov["NanoSpec I_t"] = sum(flags) / max(len(flags), 1)
        rows.append({"category": cat, "prompts": len(group), "tokens": len(tokens), "coverage": cov,
                     "mean_active": sum(r[3] for r in group) / max(len(group), 1)})
    return rows


def choose_prompts(paths, per_category):
    prompts = load_prompts(paths)
    if per_category:
        prompts = [p for c in CATEGORIES for p in [q for q in prompts if q.category == c][:per_category]]
    if not prompts:
        raise SpecError("no prompts to measure on")
    return prompts


def measure(args, facts: ModelFacts, prompts) -> tuple[list, str]:
    """(per-prompt runs, what the tokens are): the target's outputs, or the tokenized prompts."""
    cfg = engine_config(facts.name, "nanospec", args.max_new_tokens)
    if not args.prompt_tokens:
        try:
            from core.pipeline import Pipeline
            pipe = Pipeline.load(facts.name)
        except SpecError as err:
            print(f"note: {err}; measuring on the tokenized prompts", file=sys.stderr)
        else:
            label = f"the target's greedy outputs ({args.max_new_tokens} tokens per prompt, chat template)"
            return output_tokens(prompts, pipe, cfg), label
    model = None
    if args.candidates:
        try:
            from core.models import load_model
            model = load_model(facts.name, device="cpu", dtype=torch.float32)[0]
        except SpecError as err:
            print(f"note: {err}; NanoSpec's column from the text alone (K_pre = 0)", file=sys.stderr)
    how = "with the target's top-K_pre at each position" if model is not None else "from the text alone, K_pre = 0"
    label = f"the tokenized prompts, not the target's outputs (no generation; NanoSpec's I_t teacher-forced {how})"
    return prompt_tokens(prompts, facts, cfg, model), label


def run_compare(args) -> int:
    import json

    from core.models import DEFAULT_MODEL
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    facts = load_facts(args.model or DEFAULT_MODEL)
    cols, notes = map_columns(args.files, facts)
    prompts = choose_prompts(args.prompts, args.per_category)
    runs, label = measure(args, facts, prompts)
    result = {"model": facts.name, "tokens_are": label, "rows": coverage_rows(runs, cols), "notes": notes,
              "sizes": {name: len(ids) for name, ids in cols.items()}}
    result["coverage_s"] = round(time.perf_counter() - t0, 1)
    if args.accept:
        from core.maps.accept import acceptance
        result["accept"] = acceptance(facts.name, cols, prompts, args.accept_prompts, args.accept_tokens)
        result["total_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_compare(result)
    return 0


def print_compare(res: dict) -> None:
    print(f"model {res['model']}; coverage on {res['tokens_are']}")
    names = list(res["rows"][0]["coverage"])
    print("| category | prompts | tokens | " + " | ".join(names) + " |\n|---|---|---|" + "---|" * len(names))
    for row in res["rows"]:
        cells = " | ".join(f"{100 * row['coverage'][n]:.2f}%" for n in names)
        print(f"| {row['category']} | {row['prompts']} | {row['tokens']} | {cells} |")
    print(f"NanoSpec I_t: mean |I_t| {res['rows'][-1]['mean_active']:.0f} ids (W_max window)")
    for note in res["notes"]:
        print(f"note: {note}")
    print(f"coverage: {res['coverage_s']} s")
    if "accept" in res:
        from core.maps.accept import print_accept
        print_accept(res["accept"])
        print(f"total: {res['total_s']} s")
