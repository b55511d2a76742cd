"""python -m bench pair: a target + draft model pair side by side in one process, interleaved per prompt:
our AR, transformers' `generate` and assisted generation (the same pair), and our draft methods / shapes.

Prints one row per variant (tok/s ratio to our AR, τ, coverage, mean |I_t|, identical to our AR) and writes
them as JSON. Ratios only: absolute speeds on a shared machine are noise. Last, the memory bound: the target's weight
bytes per token as our runner stores them (bf16, or the GGUF's codes) over the read bandwidth measured at the end of
the run, beside our AR's and transformers' ms per token; `best_x_hf` is the most a decoder streaming those bytes once
per token could gain over transformers' generate here. `--fast` / `--q8`: the A/B switches (bench/options.py);
`--record`: the best of our speculative variants over our AR, appended to results/results.jsonl (bench/results.py).
"""
import argparse
import json
import re
import sys
import time

import torch

from bench.bandwidth import decode_tps, memory_bound, read_gbs
from bench.llamacpp.compare import gguf_of, our_decode, peer_bound, peer_row, peer_variant, usable
from bench.options import add_switches, apply_q8, with_target
from core.config import SpecConfig
from core.decoding.heads import STREAM_METHODS
from core.models import draft_defaults
from core.paper.runs import run_row
from core.trace.stats import aggregate, tokens_of, tps_ratio

# a variant: METHOD[-chainG | -treeDxKxN | -auto][-noctx | -ctx][-WN][-rM | -pM][-wWEIGHTS] over the target's measured
# draft defaults (-auto: the shape `--shape auto` picks from this machine's calibration, as a user's run gets it, named
# in the table's `chose`; -WN: NanoSpec's / NanoSlim's stream window W_max = N; -rM: a low-rank head rescores its top-M, M = 0 the
# paper's SlimSpec; -pM: NanoSpec previews the top-M of the low-rank head over V, M = 0 the paper's NanoSpec);
# "hf" / "hf-assisted" run transformers;
# "llamacpp" / "llamacpp-spec[N]" run llama.cpp on the same GGUFs (bench/llamacpp/compare.py)
VARIANT = re.compile(r"(?P<method>ar|hf|hf-assisted|full|frspec|nanospec|slimspec|nanoslim)"
                     r"(?:-chain(?P<gamma>\d+)|-tree(?P<depth>\d+)x(?P<top_k>\d+)x(?P<tree_size>\d+)|-(?P<auto>auto))?"
                     r"(?P<ctx>-noctx|-ctx)?(?:-W(?P<w_max>\d+))?(?:-r(?P<rescore>\d+)|-p(?P<preview>\d+))?"
                     r"(?:-w(?P<weights>model|int8|int4))?")


EXAMPLES = ("ar, hf, hf-assisted, nanospec, full-chain3, nanospec-tree4x2x8, nanospec-noctx, nanospec-W3072, "
            "slimspec-r512, nanospec-p64, nanospec-chain3-wint4, nanospec-auto, llamacpp, llamacpp-spec, llamacpp-spec8")


def variant(name: str) -> tuple | None:
    """name -> (method, options: SpecConfig fields, and draft_weights), or None if it does not parse."""
    if peer_variant(name) is not None:
        return "llamacpp", {}
    m = VARIANT.fullmatch(name)
    if m is None or (m["method"] in ("ar", "hf", "hf-assisted") and m.end("method") != len(name)) \
            or (m["rescore"] and m["method"] not in ("slimspec", "nanoslim")) \
            or (m["preview"] and m["method"] != "nanospec") \
            or (m["w_max"] and m["method"] not in STREAM_METHODS):
        return None
    opts = {"shape": "chain", "gamma": int(m["gamma"])} if m["gamma"] else {}
    if m["depth"]:
        opts = {"shape": "tree", **{k: int(m[k]) for k in ("depth", "top_k", "tree_size")}}
    if m["auto"]:
        opts = {"shape": "auto"}
    opts |= {"context": "off" if m["ctx"] == "-noctx" else "on"} if m["ctx"] else {}
    opts |= {"w_max": int(m["w_max"])} if m["w_max"] else {}
    opts |= {"rescore": int(m["rescore"])} if m["rescore"] else {}
    opts |= {"preview": int(m["preview"])} if m["preview"] else {}
    opts |= {"draft_weights": m["weights"]} if m["weights"] else {}
    return m["method"], opts


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench pair")
    p.add_argument("--model", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--variants", default="ar,hf,nanospec,full,hf-assisted", help=f"comma list, e.g. {EXAMPLES}")
    p.add_argument("--prompts", nargs="+", default=None, help="JSONL prompt files (default: the shipped set)")
    p.add_argument("--categories", default=None, help="comma list (default: all), one prompt each")
    p.add_argument("--limit", type=int, default=1, help="prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file for the rows")
    p.add_argument("--record", action="store_true", help="append the best speculation to results/results.jsonl")
    add_switches(p)
    return p.parse_args(argv)


def hf_run(pipe, ids, n: int, assistant=None) -> tuple[list, float]:
    """Greedy tokens and wall seconds of transformers' generate (assisted when `assistant` is a model)."""
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    with torch.no_grad():
        out = pipe.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                  assistant_model=assistant, eos_token_id=sorted(pipe.eos_ids()),
                                  pad_token_id=pipe.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist(), time.perf_counter() - t0


def run_variant(pipe, prompt, name, n, ar) -> dict:
    method, opts = variant(name)
    if method == "llamacpp":
        return peer_row(pipe, prompt, name, n, ar), None
    if method.startswith("hf"):
        ids = pipe.prompt_ids(prompt.text)
        assistant = pipe.drafter.runner.model if method == "hf-assisted" else None
        toks, wall = hf_run(pipe, ids, n, assistant)
        same = ar is not None and toks == tokens_of(ar)
        return {"variant": name, "new_tokens": len(toks), "wall_s": wall, "identical": same}, None
    base = draft_defaults(pipe.model_id) if method != "ar" else {}
    opts = dict(opts)
    if "draft_weights" in opts:  # one pipeline per draft weights, sharing the target
        pipe = pipe.with_draft_weights(opts.pop("draft_weights"))
    cfg = SpecConfig(method=method, max_new_tokens=n, **{**base, **opts}).validate()
    cfg, chose = auto_choice(pipe, cfg)
    row, _, records = run_row(pipe, prompt, cfg, ar)
    toks, secs = our_decode(records)
    return {**row, "variant": name, "trace": None, "decode_tokens": toks, "decode_s": secs, "chose": chose}, records


def auto_choice(pipe, cfg: SpecConfig) -> tuple:
    """(cfg with `--shape auto` resolved as a user's run resolves it, what it chose: "" where not on auto)."""
    if cfg.shape != "auto":
        return cfg, ""
    from core.cost.choose import resolve_shape
    from core.cost.predict import mixes_context, shape_label
    cfg = resolve_shape(pipe, cfg)[0]
    return cfg, shape_label(cfg) + (" + context" if mixes_context(cfg) else "")


def table(rows: list, names: list) -> list:
    """One row per variant: tokens/s over our AR's (whole runs, and the generation phase after the prompt's pass where
    a variant times it), τ, coverage, mean |I_t|, runs identical to our AR."""
    base = [r for r in rows if r["variant"] == "ar"]
    ar, timed = aggregate(base), all(r.get("decode_s") for r in base)
    out = []
    for v in names:
        g = [r for r in rows if r["variant"] == v]
        a, traced = aggregate(g), v != "ar" and any(r.get("steps") for r in g)
        decode = timed and g and all(r.get("decode_s") for r in g)
        out.append({"variant": v, "prompts": len(g), "tokens": a["new_tokens"], "x_ar": tps_ratio(a, ar),
                    "x_ar_decode": round(decode_tps(g) / decode_tps(base), 3) if decode else "",
                    "tau": round(a["mean_accept_len"], 2) if traced else "",
                    "coverage": round(a["coverage"], 3) if traced else "",
                    "mean_active": round(a["mean_active_vocab"]) if traced else "",
                    "identical": f"{a['identical']}/{len(g)}" if v != "ar" else "",
                    "no_repack": sum(r.get("repacked") is False for r in g) if v.startswith("llamacpp") else "",
                    "chose": "/".join(dict.fromkeys(r["chose"] for r in g if r.get("chose")))})
    return out


def main(argv=None) -> int:
    from core.paper.runs import select_prompts
    from core.pipeline import Pipeline

    args = parse(argv)
    torch.set_num_threads(args.threads)
    names = ["ar"] + [v.strip() for v in args.variants.split(",") if v.strip() and v.strip() != "ar"]
    bad = [v for v in names if variant(v) is None]
    if bad:
        print(f"error: unknown variant(s) {', '.join(bad)}", file=sys.stderr)
        return 2
    names = usable(names)
    prompts = select_prompts(argparse.Namespace(prompts=args.prompts, categories=args.categories, limit=args.limit))
    apply_q8(args)
    pipe = with_target(Pipeline.load(args.model, draft=args.draft), args)
    for v in names:  # first-call costs outside the timings
        run_variant(pipe, prompts[0], v, 4, None)
    rows = []
    for p in prompts:
        ar = None
        for v in names:
            row, records = run_variant(pipe, p, v, args.max_new_tokens, ar)
            ar = records if v == "ar" else ar
            rows.append({**row, "prompt_id": p.id, "category": p.category})
            print(json.dumps({k: row.get(k) for k in ("variant", "new_tokens", "wall_s", "identical")} | {"prompt": p.id}),
                  file=sys.stderr, flush=True)
        save(args.out, rows, names)
    bound = memory_bound(rows, pipe.model, gbs := read_gbs(), pipe.target)
    bound |= peer_bound(rows, gguf_of(pipe.model_id), gbs) if "llamacpp" in names else {}
    for r in table(rows, names):
        print("  ".join(f"{k}={v}" for k, v in r.items()))
    print("memory bound: " + "  ".join(f"{k}={v}" for k, v in bound.items()))
    save(args.out, rows, names, memory_bound=bound)
    if args.record:
        record(table(rows, names), args, argv)
    return 0


def record(rows: list, args, argv) -> None:
    """The fastest of our speculative variants identical to our AR on every prompt, as a results row."""
    ours = [r for r in rows if r["variant"] not in ("ar", "hf", "hf-assisted") and not r["variant"].startswith("llamacpp")
            and r["identical"] and r["identical"].split("/")[0] == r["identical"].split("/")[1]]
    if not ours:
        print("nothing recorded: no speculative variant of ours identical to AR on every prompt", file=sys.stderr)
        return
    from bench.results import append_row
    best = max(ours, key=lambda r: r["x_ar"] or 0)
    label = best["variant"] + (f" → {best['chose']}" if best.get("chose") else "")
    figures = {"best_spec_x": best["x_ar"], "best_spec_label": label, "phase": "whole",
               **({"x_ar_decode": best["x_ar_decode"]} if best["x_ar_decode"] else {})}
    row = append_row("speculation", args.model, figures, "python -m bench pair", argv=argv, threads=args.threads,
                     draft=args.draft)
    print(f"recorded in results/results.jsonl: {row['figures']}", file=sys.stderr)


def save(path, rows: list, names: list, **extra) -> None:
    """The rows so far and their table as JSON at `path` (no file without --out)."""
    if path:
        with open(path, "w") as f:
            json.dump({"rows": rows, "table": table(rows, names), **extra}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
