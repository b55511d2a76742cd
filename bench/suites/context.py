"""python -m bench context: context drafting side by side with plain decoding, NanoSpec without it, and
transformers' prompt-lookup `generate`, on the same prompts in one process (contenders interleaved per prompt).

Rows per category: tokens/s, ratio to AR, mean accepted length, accepted tokens per step by origin
(accept_model / accept_context), prompts identical to AR. Writes OUT/summary.csv and OUT/runs.jsonl.
`--clock cpu` times with the process's CPU time instead of the wall clock: with `--threads 1` that drops the
time spent descheduled on a loaded machine (as the runtime suite's `--clock cpu`).
"""
import argparse
import json
import sys
from pathlib import Path

from bench import harness
from core.args import add_engine_args, config_from, torch_dtype
from core.paper.runs import print_table, select_prompts, set_threads, write_csv
from core.trace import stats

VARIANTS = ("ar", "nanospec", "nanospec+context", "context", "hf", "hf+lookup")
COLS = ["category", "variant", "n_prompts", "new_tokens", "tokens_per_s", "speedup_vs_ar", "vs_nanospec",
        "mean_accept_len", "accept_model", "accept_context", "identical_to_ar"]


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench context", description=__doc__.splitlines()[0])
    p.add_argument("--prompts", nargs="+", default=None)
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=2, help="prompts per category")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lookup", type=int, default=10, help="transformers' prompt_lookup_num_tokens")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--clock", default="wall", choices=("wall", "cpu"))
    p.add_argument("--out", required=True)
    add_engine_args(p)
    return p.parse_args(argv)


CLOCK = {"wall": harness.CLOCKS["wall"], "cpu": harness.CLOCKS["process"]}


def contenders(args) -> dict:
    """variant -> fn(prompt_ids) -> (records or None, new token ids, wall s)."""
    from core.models import DEFAULT_MODEL
    from core.pipeline import Pipeline
    from bench.suites.runtime import hf_generate
    model_id, dtype = args.model or DEFAULT_MODEL, torch_dtype(args.dtype)
    spec = Pipeline.load(model_id, draft=args.draft, runtime=args.runtime, dtype=dtype)
    ctx = Pipeline.load(model_id, draft="context", runtime=args.runtime, dtype=dtype)
    cfgs = {"ar": config_from(args, "ar"), "nanospec": _with(config_from(args, "nanospec"), context="off"),
            "nanospec+context": _with(config_from(args, "nanospec"), context="on"),
            "context": _with(config_from(args, "nanospec"), context="on")}
    eos, clock = spec.eos_ids(), CLOCK[args.clock]

    def ours(pipe, c):
        def run(ids):
            ms, recs = harness.clock(lambda: list(pipe.run("", c, prompt_ids=ids)), clock)
            return recs, [t for r in recs for t in r.emitted], ms / 1e3
        return run

    def hf(lookup):
        def run(ids):
            ms, out = harness.clock(lambda: hf_generate(spec.model, ids, args.max_new_tokens, lookup), clock)
            out = out[: next((i + 1 for i, t in enumerate(out) if t in eos), len(out))]
            return None, out, ms / 1e3
        return run

    ways = {"ar": ours(spec, cfgs["ar"]), "nanospec": ours(spec, cfgs["nanospec"]),
            "nanospec+context": ours(spec, cfgs["nanospec+context"]), "context": ours(ctx, cfgs["context"]),
            "hf": hf(0), "hf+lookup": hf(args.lookup)}
    return {k: ways[k] for k in args.variants.split(",")}, spec


def _with(cfg, **kw):
    return cfg.__class__(**{**cfg.to_dict(), **kw})


def run(args) -> list:
    set_threads(args)
    prompts = select_prompts(args)
    ways, pipe = contenders(args)
    ids = {p.id: pipe.prompt_ids(p.text) for p in prompts}
    for fn in ways.values():  # warm every contender outside the timings
        fn(ids[prompts[0].id][:32])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with (out / "runs.jsonl").open("w") as f:
        for p in prompts:
            ar = None
            for name, fn in ways.items():
                recs, toks, wall = fn(ids[p.id])
                ar = (recs, toks) if name == "ar" else ar
                row = {"prompt_id": p.id, "category": p.category, "variant": name, "new_tokens": len(toks),
                       "wall_s": wall, "identical": _identical(recs, toks, ar)}
                if recs is not None:
                    row.update(stats.run_totals(recs))
                rows.append(row)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(f"{p.id} {name}: {len(toks) / wall:.1f} tok/s", file=sys.stderr)
    summary = summarize_rows(rows)
    write_csv(out / "summary.csv", COLS, summary)
    return summary


def _identical(recs, toks, ar):
    if ar is None:
        return None
    if recs is not None and ar[0] is not None:
        return stats.compare_to_ar(recs, ar[0])["identical"]
    return toks == ar[1]


def summarize_rows(rows) -> list:
    """summary.csv: per category (and `all`) x variant; means over the steps of the runs with a trace."""
    groups = stats.groups(rows, "variant", VARIANTS)
    aggs = {k: stats.aggregate(g) for k, g in groups}
    out = []
    for (cat, v), g in groups:
        a, traced = aggs[(cat, v)], any(r.get("steps") for r in g)
        out.append({"category": cat, "variant": v, "n_prompts": a["runs"], "new_tokens": a["new_tokens"],
                    "tokens_per_s": round(a["tokens_per_s"], 2), "speedup_vs_ar": stats.tps_ratio(a, aggs.get((cat, "ar"))),
                    "vs_nanospec": stats.tps_ratio(a, aggs.get((cat, "nanospec"))),
                    **{k: round(a[k], 3) if traced else "" for k in ("mean_accept_len", "accept_model", "accept_context")},
                    "identical_to_ar": f"{a['identical']}/{a['compared']}" if a["compared"] else ""})
    return out


def main(argv=None) -> int:
    print_table(run(parse(argv)), COLS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
