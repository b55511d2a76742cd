"""python -m core generate: one speculative generation, its statistics, and with --compare-ar the lossless verdict."""
import argparse
import json
import sys
import time
from dataclasses import replace

from core.config import METHODS
from core.errors import SpecError
from core.args import add_engine_args, config_from, pipeline_from
from core.cost.choose import prediction, resolve_shape
from core.cost.predict import shape_label
from core.cost.probe import anchor_probe


def run_once(pipe, prompt, cfg, chat=True) -> tuple:
    """(records, wall seconds) of one generation."""
    t0 = time.perf_counter()
    records = list(pipe.run(prompt, cfg, chat=chat))
    return records, time.perf_counter() - t0


def main(argv=None) -> int:
    from core.trace.stats import compare_to_ar, summarize
    p = argparse.ArgumentParser(prog="python -m core generate", description="one speculative generation")
    p.add_argument("--prompt", required=True)
    p.add_argument("--method", default="nanospec", choices=METHODS)
    p.add_argument("--compare-ar", action="store_true", help="also run plain greedy decoding and compare")
    p.add_argument("--json", action="store_true")
    add_engine_args(p)
    args = p.parse_args(argv)
    cfg = config_from(args, args.method, auto=True)
    if not args.prompt.strip():
        raise SpecError("the prompt is empty")
    pipe = pipeline_from(args)
    cfg, shape_note = resolve_shape(pipe, cfg)
    if shape_note:
        print(shape_note, file=sys.stderr)
    if "fused kernels off" in pipe.runtime_note:
        print(f"note: {pipe.runtime_note}", file=sys.stderr)
    records, wall = run_once(pipe, args.prompt, cfg, not args.no_chat)
    out = summarize(records, wall)
    out.update(model=pipe.model_id, draft=pipe.draft_name, runtime=pipe.runtime_name, runtime_note=pipe.runtime_note,
               method=cfg.method,
               dtype=str(pipe.model.dtype).removeprefix("torch."), shape=shape_label(cfg), shape_note=shape_note)
    if cfg.method != "ar":  # read at a probe of this moment where the machine is calibrated (~0.3 s; 1.5 s on the pair)
        out.update(prediction(pipe, cfg, len(pipe.prompt_ids(args.prompt, not args.no_chat)), anchor_probe(pipe)))
    if args.compare_ar:
        ar, ar_wall = run_once(pipe, args.prompt, replace(cfg, method="ar"), not args.no_chat)
        cmp = compare_to_ar(records, ar)
        out.update(identical_to_ar=cmp["identical"], ar_tokens_per_s=summarize(ar, ar_wall)["tokens_per_s"],
                   first_diff=cmp["first_diff"], near_tie=cmp["tie"], verdict=cmp["verdict"])
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(out["text"])
        keys = ("new_tokens", "steps", "mean_accept_len", "mean_active_vocab", "coverage", "tokens_per_s",
                "identical_to_ar", "ar_tokens_per_s")
        print("\n" + "  ".join(f"{k}={_fmt(out[k])}" for k in keys if k in out), file=sys.stderr)
    return 0


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)
