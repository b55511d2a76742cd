"""python -m core export: a static draft vocabulary for serving engines, measured on held-out prompts.

Files written for --out PREFIX and --size K:
    PREFIX.pt              1-D int64 tensor of K sorted, unique target ids: SGLang `--speculative-token-map`,
                           vLLM `speculative_config.draft_token_map`
    PREFIX.json            the same ids as a JSON list (vLLM)
    PREFIX.d2t.safetensors EAGLE-3 tensors: d2t [K] int64 (target = i + d2t[i]), t2d [V] bool
Every map keeps EOS, the tokenizer's special tokens and the chat template's added tokens (freq.special_ids).

Sources, each a ranking of the whole vocabulary (the map = the specials + the best-ranked ids up to K):
    freq         corpus counts (FR-Spec): the model's shipped table, or --freq-table
    generations  how often the target emits each id in its own greedy generations of the calibration
                 prompts (VocabTrim)
    nanospec     NanoSpec-calibrated: the calibration prompts run through the engine with method nanospec.
                 needed[t] = times the target emitted t: each emitted token is one the draft had to propose
                             from I_t at its step (the trace's emitted_in_vocab says whether I_t held it;
                             speculation is lossless, so these are the target's own greedy tokens);
                 kept[t]   = times t entered NanoSpec's stream S as one of the target's own top-K candidates
                             (top-K_pre of the prefill logits, top-K_ver of each verify).
                 Ranked by p(t) = 1/2 needed[t]/sum(needed) + 1/2 corpus[t]/sum(corpus) (the corpus table
                 smooths a few thousand calibration tokens), then by kept[t]. Weighing kept[t] as a third
                 distribution measured lower held-out coverage (docs/serving.md).
Ties and tokens a source never saw (count 0) fall back to the FR-Spec corpus rank, then to the id.
Coverage = fraction of the target's greedy tokens on held-out prompts that lie in the map.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

from core.paths import write_atomic
from core.config import SpecConfig
from core.errors import SpecError
from core.prompts import DEFAULT_PROMPTS, load_prompts

RANKINGS = ("freq", "generations", "nanospec")  # what ranks the exported vocabulary (--source)
CANDIDATE_SOURCES = ("prefill", "verify")  # chunks of S that are the target's own top-K candidates


# ---------------------------------------------------------------- ranking -> map

def ranking(keys: list, vocab_size: int) -> torch.Tensor:
    """Ids best first: by keys[0] descending, ties by keys[1], ..., remaining ties by lower id."""
    order = torch.arange(vocab_size)
    for key in reversed(keys):  # stable sorts, least significant key first
        order = order[torch.sort(-key[order], stable=True).indices]
    return order


def token_map(order: torch.Tensor, k: int, always) -> torch.Tensor:
    """Sorted int64 [k]: the `always` ids plus the best-ranked others."""
    V = len(order)
    if not 1 <= k <= V:
        raise SpecError(f"--size must be in [1, {V}] (the model's vocabulary), got {k}")
    always = torch.unique(torch.as_tensor(list(always), dtype=torch.long))
    if len(always) and (always.min() < 0 or always.max() >= V):
        raise SpecError(f"special token ids must lie in [0, {V})")
    if len(always) > k:
        raise SpecError(f"--size {k} is smaller than the {len(always)} special tokens every map keeps")
    rest = order[~torch.isin(order, always)][: k - len(always)]
    return torch.sort(torch.cat([always, rest])).values


def d2t_t2d(ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3 tensors of a sorted map: d2t[i] = ids[i] - i (target = i + d2t[i]); t2d[t] = t in ids."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(len(ids)), t2d


def write_map(prefix, ids: torch.Tensor, vocab_size: int) -> list[Path]:
    """PREFIX.pt, PREFIX.json, PREFIX.d2t.safetensors (atomic writes)."""
    from safetensors.torch import save_file
    prefix = Path(prefix)
    ids = ids.to(torch.int64).contiguous()
    d2t, t2d = d2t_t2d(ids, vocab_size)
    paths = [prefix.with_name(prefix.name + s) for s in (".pt", ".json", ".d2t.safetensors")]
    write_atomic(paths[0], lambda tmp: torch.save(ids, tmp))
    write_atomic(paths[1], json.dumps(ids.tolist()))
    write_atomic(paths[2], lambda tmp: save_file({"d2t": d2t, "t2d": t2d}, tmp))
    return paths


# ---------------------------------------------------------------- calibration counts

def run_prompts(pipe, prompts, method: str, max_new_tokens: int) -> list:
    """One list of StepRecords per prompt (greedy, chat template)."""
    cfg = SpecConfig(method=method, max_new_tokens=max_new_tokens).validate()
    return [list(pipe.run(p.text, cfg)) for p in prompts]


def emitted_counts(runs, vocab_size: int) -> torch.Tensor:
    """LongTensor[V]: how often the target emitted each id (every run is lossless: the target's greedy tokens)."""
    ids = [t for records in runs for r in records for t in r.emitted]
    return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]


def candidate_counts(runs, vocab_size: int) -> torch.Tensor:
    """LongTensor[V]: how often each id entered NanoSpec's S as a target top-K candidate (prefill, verify)."""
    ids = [t for records in runs for r in records for src, chunk in r.stream.get("appended", [])
           if src in CANDIDATE_SOURCES for t in chunk]
    return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab_size)[:vocab_size]


def dynamic_coverage(runs) -> float:
    """Fraction of emitted tokens (speculative steps) that NanoSpec's I_t held when the draft ran."""
    hits = [v for records in runs for r in records if r.kind == "step" for v in r.emitted_in_vocab]
    return sum(hits) / max(len(hits), 1)


def source_keys(source: str, corpus, runs, vocab_size: int) -> list:
    """Sort keys of a source, most significant first (ranking() breaks the remaining ties by id).
    corpus: the FR-Spec table's counts [V] or None."""
    prior = [] if corpus is None else [corpus]
    if source == "freq":
        if corpus is None:
            raise SpecError("no frequency table for this model: give --freq-table (build one with python -m core freq)")
        return prior
    needed = emitted_counts(runs, vocab_size)
    if source == "generations":
        return [needed] + prior
    kept = candidate_counts(runs, vocab_size)
    if corpus is None:
        return [needed, kept]
    # p(t) = 1/2 needed[t] / sum(needed) + 1/2 corpus[t] / sum(corpus): a few thousand calibration tokens
    # smoothed by the corpus distribution
    mixed = needed.double() / max(int(needed.sum()), 1) + corpus.double() / max(int(corpus.sum()), 1)
    return [mixed, kept] + prior


# ---------------------------------------------------------------- prompts

def calibration_prompts(paths, per_file: int | None, max_chars: int) -> list:
    """Prompts of each file (at most max_chars long), `per_file` of them evenly spaced through the file."""
    out = []
    for path in paths:
        prompts = [p for p in load_prompts(path) if len(p.text) <= max_chars]
        if per_file and len(prompts) > per_file:
            prompts = [prompts[i * len(prompts) // per_file] for i in range(per_file)]
        out += prompts
    if not out:
        raise SpecError("no calibration prompts (give --calibrate FILES)")
    return out


def check_disjoint(calibration, heldout) -> None:
    """Held-out prompts must never be seen by the calibration."""
    shared = {p.text for p in calibration} & {p.text for p in heldout}
    if shared:
        raise SpecError(f"{len(shared)} held-out prompts are also calibration prompts: use disjoint prompt sets")


def coverage(ids: torch.Tensor, tokens: torch.Tensor) -> float:
    return float(torch.isin(tokens, ids).float().mean()) if len(tokens) else 0.0


# ---------------------------------------------------------------- CLI

def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m core export", description=__doc__.split("\n")[0])
    p.add_argument("--source", default="nanospec", choices=RANKINGS)
    p.add_argument("--size", type=int, default=32768, metavar="K", help="ids in the exported map")
    p.add_argument("--out", default=None, metavar="PREFIX", help="write PREFIX.pt, PREFIX.json, PREFIX.d2t.safetensors")
    p.add_argument("--model", default=None, help="offline alias or Hugging Face id (default: smollm2-135m-instruct)")
    p.add_argument("--freq-table", default=None, metavar="PATH", help="FR-Spec table (default: the model's shipped one)")
    p.add_argument("--calibrate", nargs="+", default=[], metavar="FILE", help="calibration prompt files (.jsonl)")
    p.add_argument("--per-file", type=int, default=16, metavar="N", help="calibration prompts per file, evenly spaced")
    p.add_argument("--max-prompt-chars", type=int, default=1500)
    p.add_argument("--heldout", nargs="+", default=[str(DEFAULT_PROMPTS)], metavar="FILE",
                   help="held-out prompt files for the coverage report (never seen by calibration)")
    p.add_argument("--no-report", action="store_true", help="skip the held-out coverage report")
    p.add_argument("--compare-sizes", type=int, nargs="*", default=[], metavar="K",
                   help="also report coverage at these sizes")
    p.add_argument("--max-new-tokens", type=int, default=96, metavar="N", help="tokens per calibration / held-out prompt")
    p.add_argument("--eagle-out", default=None, metavar="DIR", help="also write the EAGLE head in the official layout")
    p.add_argument("--eagle-arch", default="LlamaForCausalLM", choices=("LlamaForCausalLM", "LlamaForCausalLMEagle"),
                   help="config.json architecture: LlamaForCausalLM (EAGLE repo, vLLM) or LlamaForCausalLMEagle (SGLang)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p.parse_args(argv)


def load_corpus(args, vocab_size):
    """The FR-Spec table's counts [V] (--freq-table, else the model's shipped table), or None."""
    from core.decoding.freq import fit_counts, load_table
    from core.models import DEFAULT_MODEL, freq_table, model_alias
    name = args.freq_table or model_alias(args.model or DEFAULT_MODEL) or args.model
    try:
        path = freq_table(name)
    except SpecError:
        if args.freq_table:
            raise
        return None
    return fit_counts(load_table(path)[0], vocab_size, path)


def calibrate(args, pipe) -> list:
    """Calibration runs of the chosen source (none for freq)."""
    if args.source == "freq":
        return []
    prompts = calibration_prompts(args.calibrate, args.per_file, args.max_prompt_chars)
    if not args.no_report:
        check_disjoint(prompts, load_prompts(args.heldout))
    method = "nanospec" if args.source == "nanospec" else "ar"
    print(f"calibrating: {len(prompts)} prompts x {args.max_new_tokens} tokens ({method})", file=sys.stderr)
    return run_prompts(pipe, prompts, method, args.max_new_tokens)


def report(args, pipe, order_of: dict, always) -> dict:
    """Held-out coverage of each ranking at --size and --compare-sizes."""
    heldout = load_prompts(args.heldout)
    print(f"held-out: {len(heldout)} prompts x {args.max_new_tokens} tokens (nanospec)", file=sys.stderr)
    runs = run_prompts(pipe, heldout, "nanospec", args.max_new_tokens)  # lossless: the target's greedy tokens
    tokens = torch.tensor([t for records in runs for r in records for t in r.emitted], dtype=torch.long)
    rows = []
    for k in sorted({args.size, *args.compare_sizes}):
        rows.append({"K": k, **{name: coverage(token_map(order, k, always), tokens) for name, order in order_of.items()}})
    return {"heldout_prompts": len(heldout), "heldout_tokens": len(tokens),
            "nanospec_dynamic_coverage": dynamic_coverage(runs), "coverage": rows}


def print_report(rep: dict, calib: dict) -> None:
    names = [k for k in rep["coverage"][0] if k != "K"]
    print(f"calibration: {calib}")
    print(f"held-out coverage: {rep['heldout_tokens']} target tokens over {rep['heldout_prompts']} prompts "
          f"(NanoSpec's dynamic I_t held {rep['nanospec_dynamic_coverage']:.2%} of them)")
    print("| K | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for row in rep["coverage"]:
        print(f"| {row['K']} | " + " | ".join(f"{row[n]:.2%}" for n in names) + " |")


def export_eagle(pipe, out_dir, architecture) -> None:
    from core.decoding.eagle_io import save_official
    if pipe.draft_name != "eagle":
        raise SpecError(f"{pipe.model_id} has no EAGLE head to export")
    for note in save_official(pipe.drafter.head, out_dir, architecture):
        print(f"note: {note}", file=sys.stderr)
    print(f"{out_dir}: EAGLE head in the official layout (config.json, model.safetensors)")


def check_args(args) -> None:
    """Errors the arguments alone show, before any model loads."""
    if args.source != "freq" and not args.calibrate:
        raise SpecError(f"--source {args.source} needs --calibrate FILES (prompts the held-out set never contains)")
    if args.size < 1 or any(k < 1 for k in args.compare_sizes):
        raise SpecError("--size and --compare-sizes must be >= 1")
    if args.max_new_tokens < 1 or (args.threads is not None and args.threads < 1):
        raise SpecError("--max-new-tokens and --threads must be >= 1")


def rankings(source: str, corpus, runs, vocab_size: int) -> dict:
    """{name: ids best first} of the chosen source and of the ones the same runs give for free."""
    names = [source]
    if source == "nanospec":  # the same runs give VocabTrim's counts (lossless: the target's own tokens)
        names.append("generations")
    if corpus is not None and source != "freq":
        names.append("freq")
    return {name: ranking(source_keys(name, corpus, runs, vocab_size), vocab_size) for name in names}


def main(argv=None) -> int:
    from core.args import pipeline_from
    from core.decoding.freq import special_ids
    args = parse_args(argv)
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.draft, args.runtime, args.dtype = "auto", "auto", "auto"
    pipe = pipeline_from(args)
    V, always = pipe.vocab_size, special_ids(pipe.tokenizer)
    runs = calibrate(args, pipe)
    order_of = rankings(args.source, load_corpus(args, V), runs, V)
    ids = token_map(order_of[args.source], args.size, always)
    if args.out:
        for path in write_map(args.out, ids, V):
            print(f"{path}: {len(ids)} ids of {V}")
    if args.eagle_out:
        export_eagle(pipe, args.eagle_out, args.eagle_arch)
    if not args.no_report:
        calib = {"prompts": len(runs), "tokens": sum(len(r.emitted) for rs in runs for r in rs)}
        if args.source == "nanospec":
            calib["nanospec_dynamic_coverage"] = round(dynamic_coverage(runs), 4)
        rep = report(args, pipe, order_of, always)
        if args.json:
            print(json.dumps({"calibration": calib, **rep}, indent=1))
        else:
            print_report(rep, calib)
    return 0
