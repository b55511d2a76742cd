"""The methods × prompts runner the paper figures and the `methods` benchmark share: many prompts × methods in one
process, side by side, resumable.

Writes DIR/runs.jsonl (one line per finished prompt × method; rerunning skips them), DIR/steps.csv
and DIR/summary.csv (per category × method, plus `all`). Speedups are ratios to the plain AR run
of the same prompts on the same runtime in the same process. `python -m core bench --figures DIR` (core/paper/run.py)
builds the paper's grid on it; `python -m bench methods` (bench/suites/methods.py) prints its table.
"""
import argparse
import csv
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from core.args import add_engine_args, config_from, pipeline_from
from core.config import METHODS, SpecConfig
from core.paths import write_atomic
from core.errors import SpecError
from core.trace import stats
from core.trace.record import ORIGINS, TIMERS

SUMMARY_COLS = ["category", "method", "n_prompts", "new_tokens", "tokens_per_s", "speedup_vs_ar", "predicted_speedup",
                "mean_accept_len",
                "mean_active_vocab", "coverage", "lm_head_ms_per_call", "draft_ms_per_step", "verify_ms_per_step",
                "identical_to_ar_frac", "ties", "accept_model", "accept_context"]
STEP_COLS = ["prompt_id", "category", "method", "step", "accept_len", "active", "covered", "emitted", *TIMERS]


def parse(argv, prog="python -m core bench"):
    p = argparse.ArgumentParser(prog=prog, description="methods over prompt files: the paper's figures or the table")
    p.add_argument("--prompts", nargs="+", default=None, help="Spec-Bench / HumanEval / SpecLens JSONL files")
    p.add_argument("--methods", default="ar,full,frspec,nanospec,slimspec,nanoslim")
    p.add_argument("--limit", type=int, default=None, help="at most N prompts per category (--figures: 1 unless given)")
    p.add_argument("--figures", default=None, help="run the paper experiments; write figures, CSVs, report.md here")
    p.add_argument("--sweep-prompts", type=int, default=1,
                   help="--figures: prompts (one per category, in order) for the FR size / W_max / ablation sweeps")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 avoids oversubscription)")
    p.add_argument("--no-png", dest="png", action="store_false", help="--figures: skip the PNG files")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep")
    p.add_argument("--compare-ar", action="store_true", help="check greedy losslessness against AR")
    p.add_argument("--out", default=None, help="results directory (required unless --figures)")
    add_engine_args(p)
    args = p.parse_args(argv)
    if not (args.out or args.figures):
        p.error("--out is required (or --figures DIR)")
    return args


def select_prompts(args) -> list:
    """Prompts of --prompts (default: the shipped set), only --categories, at most --limit per category."""
    from core.prompts import DEFAULT_PROMPTS, load_prompts, per_category
    cats = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
    prompts = per_category(load_prompts(args.prompts or [DEFAULT_PROMPTS], categories=cats), args.limit)
    if not prompts:
        raise SpecError("no prompts to run (check --prompts / --categories)")
    return prompts


def methods_of(text) -> list:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise SpecError(f"unknown method(s) {', '.join(bad) or '(none)'}; choose from {', '.join(METHODS)}")
    return ["ar"] + [m for m in methods if m != "ar"]  # AR first: every speedup is a ratio to it


def open_out(out: Path, settings: dict) -> dict:
    """Results already in DIR for these settings: {(prompt_id, method): row}."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    if cfg_path.exists() and _with_defaults(_read_json(cfg_path)) not in (settings, None):
        raise SpecError(f"{out} holds results of other settings; use a new --out or delete it")
    write_atomic(cfg_path, json.dumps(settings, indent=1))
    done = {}
    runs = out / "runs.jsonl"
    if runs.exists():
        for line in runs.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut by an interruption
                continue
            done[(row["prompt_id"], row.get("variant", row["method"]))] = row
    return done


BEFORE = {"context": "off"}  # options whose default changed behaviour: what results written before them ran with


def _with_defaults(settings):
    """Stored settings with engine options added since they were written set to their defaults
    (so a new option does not orphan finished results): bench's "configs", the paper grid's "base"."""
    if not isinstance(settings, dict):
        return settings
    try:
        out = dict(settings)
        if isinstance(out.get("configs"), dict):
            out["configs"] = {m: SpecConfig.from_dict({**BEFORE, **c}).to_dict() for m, c in out["configs"].items()}
        if isinstance(out.get("base"), dict):
            out["base"] = SpecConfig.from_dict({**BEFORE, **out["base"]}).to_dict()
        return out
    except (SpecError, TypeError):
        return settings


def run_row(pipe, prompt, cfg, ar_records=None, variant=None) -> tuple:
    """(bench row: run_totals + verdict + per-step trace, steps.csv rows, records) of one generation."""
    t0 = time.perf_counter()
    records = list(pipe.run(prompt.text, cfg))
    wall = time.perf_counter() - t0
    row = {"prompt_id": prompt.id, "category": prompt.category, "method": cfg.method, "wall_s": wall,
           **stats.run_totals(records), **stats.verdict_fields(records, ar_records),
           "variant": variant or cfg.method, "trace": stats.step_trace(records)}
    step_rows = [{"prompt_id": prompt.id, "category": prompt.category, "method": cfg.method, "step": r.step,
                  "accept_len": len(r.emitted), "active": r.stream["active"], "covered": sum(r.emitted_in_vocab),
                  "emitted": len(r.emitted), **{k: round(v, 3) for k, v in r.timing_ms.items()}}
                 for r in records if r.kind != "prefill"]
    return row, step_rows, records


def summarize_rows(rows: list) -> list:
    """summary.csv: per category (and `all`) x method, speedups against AR of the same prompts."""
    groups = stats.groups(rows, "method", METHODS)
    aggs = {k: stats.aggregate(g) for k, g in groups}
    return [summary_row(cat, m, aggs[(cat, m)], aggs.get((cat, "ar"))) for (cat, m), _ in groups]


def summary_row(cat, method, a, ar) -> dict:
    spec = method != "ar"
    return {"category": cat, "method": method, "n_prompts": a["runs"], "new_tokens": a["new_tokens"],
            "tokens_per_s": round(a["tokens_per_s"], 3), "speedup_vs_ar": stats.tps_ratio(a, ar),
            "predicted_speedup": "",  # filled by add_predictions where this machine has a calibration
            "mean_accept_len": round(a["mean_accept_len"], 3),
            "mean_active_vocab": round(a["mean_active_vocab"], 1) if spec else "",
            "coverage": round(a["coverage"], 4) if spec else "",
            **{k: round(a[k], 3) for k in ("lm_head_ms_per_call", "draft_ms_per_step", "verify_ms_per_step")},
            "identical_to_ar_frac": round(a["identical"] / a["compared"], 4) if a["compared"] else "",
            "ties": a["ties"] if a["compared"] else "",
            **{f"accept_{o}": round(a[f"accept_{o}"], 3) for o in ORIGINS}}


def add_predictions(summary: list, pipe, cfgs: dict, prompt_tokens: float | None = None, probe: dict | None = None) -> None:
    """predicted_speedup beside speedup_vs_ar: the cost model on this machine's cached calibration ("" without one),
    for whole runs of the prompts' mean length, anchored to probe (calibrate.probe, taken before the runs) if given."""
    from core.cost.choose import prediction
    predicted = {m: prediction(pipe, c, prompt_tokens, probe)["predicted_speedup"] for m, c in cfgs.items() if m != "ar"}
    for row in summary:
        row["predicted_speedup"] = predicted.get(row["method"]) or row["predicted_speedup"]


def _read_json(path: Path):
    """A config.json torn by an interruption reads as None (it is rewritten whole)."""
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def write_csv(path: Path, cols, rows) -> None:
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    write_atomic(path, write)


def run_bench(args) -> list:
    from tqdm import tqdm
    methods = methods_of(args.methods)
    prompts = select_prompts(args)
    cfgs = {m: config_from(args, m, auto=True) for m in methods}
    out = Path(args.out)
    settings = {"model": args.model, "draft": args.draft, "runtime": args.runtime, "prompts": [p.id for p in prompts],
                "configs": {m: c.to_dict() for m, c in cfgs.items()}}
    if args.dtype != "auto":  # (results dirs written before --dtype existed stay valid)
        settings["dtype"] = args.dtype
    done = open_out(out, settings)
    set_threads(args)
    pipe = pipeline_from(args)
    cfgs = resolved(pipe, cfgs)
    for m in methods:  # warm every head once (SVD, buffers, first-call costs) outside the timings
        list(pipe.run(prompts[0].text, replace(cfgs[m], max_new_tokens=4)))
    from core.cost.probe import anchor_probe
    now = anchor_probe(pipe)
    steps_path = out / "steps.csv"
    step_rows = _read_steps(steps_path)
    with (out / "runs.jsonl").open("a") as runs:
        for p in tqdm(prompts, desc="prompts", file=sys.stderr):
            ar_records = None
            for m in methods:
                if (p.id, m) in done and not (args.compare_ar and m == "ar"):
                    continue
                row, srows, records = run_row(pipe, p, cfgs[m], ar_records if args.compare_ar else None)
                ar_records = records if m == "ar" else ar_records
                if (p.id, m) in done:
                    continue
                done[(p.id, m)] = row
                runs.write(json.dumps(row) + "\n")
                runs.flush()
                step_rows += srows
            write_csv(steps_path, STEP_COLS, step_rows)
    summary = summarize_rows(list(done.values()))
    add_predictions(summary, pipe, cfgs, sum(len(pipe.prompt_ids(p.text)) for p in prompts) / max(len(prompts), 1), now)
    write_csv(out / "summary.csv", SUMMARY_COLS, summary)
    return summary


def resolved(pipe, cfgs: dict) -> dict:
    """Each method's config with `--shape auto` resolved on this machine's calibration (each method drafts, even where
    plain decoding is predicted faster), the choice printed."""
    from core.cost.choose import resolve_shape
    out = {}
    for m, c in cfgs.items():
        out[m], note = resolve_shape(pipe, c, allow_plain=False)
        if note:
            print(f"{m}: {note}", file=sys.stderr)
    return out


def set_threads(args) -> None:
    if getattr(args, "threads", None):
        import torch
        torch.set_num_threads(args.threads)


def _read_steps(path: Path) -> list:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def print_table(rows, cols=SUMMARY_COLS) -> None:
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
