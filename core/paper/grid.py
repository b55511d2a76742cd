"""The paper experiments' grid of runs (prompt × variant): its settings, the sweep variants, and running it.

Each run is a bench row (core/paper/runs.py: run_row) appended to DIR/runs.jsonl, so a rerun skips finished runs.

    main  : every selected prompt × (ar, full, frspec, nanospec, slimspec, nanoslim) at the base settings
    sweep : the first prompt of the first --sweep-prompts categories × FR-Spec sizes, W_max values and
            stream-source ablations (the base point of each sweep is the main run of that prompt)
"""
import argparse
import json
from dataclasses import replace
from pathlib import Path

from core.config import METHODS, SpecConfig
from core.errors import SpecError
import core.paper.runs as runner

DEFAULT_LIMIT = 1  # prompts per category when --limit is not given


FR_SIZES = (1024, 2048, 4096, 8192, 16384, 32768)


W_MAXES = (512, 1024, 2048, 3072, 4096, 8192)


ABLATIONS = {  # variant -> (SpecConfig overrides, what S receives)
    "nanospec": ({}, "prompt + prefill top-K_pre + draft + verify top-K_ver (all)"),
    "nanospec_kpre0": ({"k_pre": 0}, "prompt + draft + verify (no prefill top-k)"),
    "nanospec_kver0": ({"k_ver": 0}, "prompt + prefill + draft (no verify top-k)"),
    "nanospec_kpre0_kver0": ({"k_pre": 0, "k_ver": 0}, "prompt + draft"),
    "nanospec_context": ({"sources": "prompt,prefill"}, "context only: prompt + prefill top-K_pre"),
    "nanospec_extension": ({"sources": "draft,verify"}, "extension only: draft + verify top-K_ver"),
}


PAPER = {  # numbers quoted from the NanoSpec paper (their models and GPUs), only those we were given
    "active": "< 3k active tokens", "coverage": "73–97% coverage", "draft_time": "draft time −51.6%",
    "speedup": "1.17–1.29× end-to-end"}


def settings_from(obj) -> argparse.Namespace:
    """the runner's parsed arguments (runner.parse), or a dict of them (the app: figures, prompts, limit, max_new_tokens, ...)."""
    if isinstance(obj, argparse.Namespace):
        return obj
    obj = dict(obj)
    if "figures" not in obj:
        raise SpecError("settings need 'figures': the output directory")
    args = runner.parse(["--figures", str(obj["figures"])])
    for key, value in obj.items():
        if not hasattr(args, key):
            raise SpecError(f"unknown setting {key!r}")
        setattr(args, key, value)
    for key in ("limit", "max_new_tokens", "sweep_prompts", "threads", "seed", "w_max", "fr_size"):
        if isinstance(getattr(args, key), float):  # UI sliders hand over floats
            setattr(args, key, int(getattr(args, key)))
    if isinstance(args.categories, (list, tuple)):
        args.categories = ",".join(args.categories) or None
    if isinstance(args.prompts, (str, Path)):
        args.prompts = [args.prompts]
    return args


def sweep_prompts(prompts, n: int) -> list:
    """The first prompt of each category, in order, at most n."""
    firsts = {}
    for p in prompts:
        firsts.setdefault(p.category, p)
    return list(firsts.values())[:max(n, 0)]


def sweep_variants(base: SpecConfig) -> dict:
    """variant name -> SpecConfig for the sweeps; a sweep's base point is the main run (same name)."""
    out = {}
    for k in FR_SIZES:
        name = "frspec" if k == base.fr_size else f"frspec_v{k}"
        out[name] = _with(base, method="frspec", fr_size=k)
    for w in W_MAXES:
        name = "nanospec" if w == base.w_max else f"nanospec_w{w}"
        out[name] = _with(base, method="nanospec", w_max=w)
    for name, (over, _) in ABLATIONS.items():
        out[name] = _with(base, method="nanospec", **over)
    return out


def _with(cfg, **over) -> SpecConfig:
    return replace(cfg, **over).validate()


def plan(args, prompts) -> list:
    """[(prompt, variant, cfg)] in run order: per prompt, the main methods (AR first), then its sweeps."""
    # the papers' methods: without context drafting, SlimSpec without rescoring and NanoSpec without a low-rank
    # preview unless --rescore / --preview say so
    base = _with(runner.config_from(args, "nanospec"), context="off", rescore=args.rescore or 0,
                 preview=args.preview or 0)
    main = {m: _with(base, method=m) for m in METHODS}
    sweep = sweep_variants(base)
    sweep_ids = {p.id for p in sweep_prompts(prompts, args.sweep_prompts)}
    jobs = []
    for p in prompts:
        jobs += [(p, name, cfg) for name, cfg in main.items()]
        if p.id in sweep_ids:
            jobs += [(p, name, cfg) for name, cfg in sweep.items() if name not in main]
    return jobs


def run_grid(pipe, jobs, done, runs_path, progress) -> None:
    """Run every job not in `done`, appending each finished run to runs.jsonl at once."""
    todo = [(p, v, c) for p, v, c in jobs if (p.id, v) not in done]
    if todo:
        warm_up(pipe, todo)
    with runs_path.open("a") as runs:
        for i, (p, variant, cfg) in enumerate(todo):
            progress(i / len(todo), f"{p.id} · {variant} ({i + 1}/{len(todo)})")
            row, _, _ = runner.run_row(pipe, p, cfg, variant=variant)
            done[(p.id, variant)] = row
            runs.write(json.dumps(row) + "\n")
            runs.flush()
    progress(1.0, "runs done")


def warm_up(pipe, todo) -> None:
    """One short run per distinct head (SVD, buffers, first-call costs) outside the timings."""
    seen = set()
    for p, _, cfg in todo:
        key = (cfg.method, cfg.fr_size, cfg.w_max, cfg.rank)
        if key not in seen:
            seen.add(key)
            list(pipe.run(p.text, _with(cfg, max_new_tokens=4)))


def _of(rows, variant, ids=None) -> list:
    return [r for r in rows if r["variant"] == variant and (ids is None or r["prompt_id"] in ids)]
