"""python -m bench isa: a GGUF target's decoding per CPU kernel variant, side by side in one process.

One target model, one runner per variant: `codes-avx512` / `codes-avx2` / `codes-amx` (its products on its GGUF's bf16
codes, SPECLENS_CPU_ISA capped to that variant while the runner is built; a bf16 model), `int8-avx512` / `int8-avxvnni` /
`int8-avx2` (its GGUF's blocks with int8 activations, core/kernels/cpu/gguf_q8.py, capped likewise), `packed` (oneDNN's packed bf16 copy), beside
transformers' `generate` (`hf`). Per prompt, interleaved: each variant's plain decoding (ar) and, with --spec, the
speculative method on the pair (compared with that variant's own plain decoding) (the drafter shared, built under the uncapped ISA). Then per variant the ms of a 1-token
step and of a verify-sized forward (the target's draft tree + 1 rows) after the prompt. Ratios only: a shared machine.
"""
import argparse
import json
import os
import sys
from contextlib import contextmanager

import torch

from bench import harness
from bench.options import add_switches, apply_q8, fast_config
from core.config import SpecConfig
from core.kernels.cpu import isa
from core.models import draft_defaults
from core.trace.stats import aggregate, tokens_of, tps_ratio


@contextmanager
def capped(variant: str):
    """SPECLENS_CPU_ISA = variant inside the block (restored after)."""
    old = os.environ.get(isa.ENV)
    os.environ[isa.ENV] = variant
    try:
        yield
    finally:
        os.environ.pop(isa.ENV) if old is None else os.environ.__setitem__(isa.ENV, old)


def target_of(pipe, name: str, args=None):
    """The target runner of variant `name` (codes-VARIANT | packed), on pipe's model."""
    from core.runtime.config import FastConfig
    from core.runtime.fast import make_runner
    if name == "packed":
        return make_runner(pipe.model, pipe.tokenizer, "auto", fast_config(args, FastConfig(codes=False)))
    if name.startswith("int8-"):
        with capped(name.removeprefix("int8-")):
            runner = make_runner(pipe.model, pipe.tokenizer, "auto", fast_config(args, FastConfig(codes_math="int8")))
        assert runner.codes_variant == isa.Q8[name.removeprefix("int8-")][1], (name, runner.codes_variant)
        return runner
    with capped(name.removeprefix("codes-")):
        runner = make_runner(pipe.model, pipe.tokenizer, "auto", fast_config(args, FastConfig(codes_math="bf16")))
    assert runner.codes_variant == isa.LABELS[name.removeprefix("codes-")], (name, runner.codes_variant)
    return runner


def pipeline_of(pipe, runner):
    from core.pipeline import Pipeline
    return Pipeline(pipe.model_id, pipe.model, pipe.tokenizer, runner, pipe.drafter, pipe.draft_name, pipe.fr_rank)


def step_ms(runner, ids: list, rows: int, reps: int = 5) -> float:
    """Fastest ms of one forward of `rows` new tokens after the prompt `ids`, logits of every row included."""
    runner.reset()
    runner.forward(torch.tensor(ids), torch.arange(len(ids)))
    runner.commit(range(len(ids)))
    new, pos = torch.tensor(ids[:rows]), torch.arange(len(ids), len(ids) + rows)
    ms = harness.best(lambda: runner.logits(runner.forward(new, pos)[0]), reps, warmup=0,
                      after=lambda _: runner.commit([]))
    runner.reset()
    return ms


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench isa", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--variants", default=None, help="comma list of codes-amx, codes-avx512, codes-avx2, int8-avx512, "
                   "int8-avxvnni, int8-avx2, packed, hf (default: every codes and int8 variant here, packed, hf)")
    p.add_argument("--spec", default="nanospec", help="speculative method run on each variant ('' for none)")
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    add_switches(p)
    return p.parse_args(argv)


def run(pipe, prompt, name: str, method: str, n: int, ar) -> tuple:
    """(row, records) of one generation of variant `name` with `method` (hf: transformers' generate)."""
    if name == "hf":
        from bench.suites.pair import hf_run
        toks, wall = hf_run(pipe, pipe.prompt_ids(prompt.text), n)
        return {"new_tokens": len(toks), "wall_s": wall, "identical": ar is not None and toks == tokens_of(ar)}, None
    from core.paper.runs import run_row
    cfg = SpecConfig(method=method, max_new_tokens=n, **(draft_defaults(pipe.model_id) if method != "ar" else {}))
    row, _, records = run_row(pipe, prompt, cfg.validate(), ar)
    return row, records


def main(argv=None) -> int:
    from core.paper.runs import select_prompts
    from core.pipeline import Pipeline
    a = parse(argv)
    torch.set_num_threads(a.threads)
    apply_q8(a)
    base = Pipeline.load(a.model, draft=a.draft)
    bf16 = base.model.dtype == torch.bfloat16  # the bf16 codes multiply a bf16 model's own weights
    here = [f"codes-{v}" for v in isa.codes_variants() if v != "none" and bf16] + [f"int8-{v}" for v in isa.q8_variants()]
    names = [v.strip() for v in a.variants.split(",")] if a.variants else here + ["packed", "hf"]
    pipes = {v: base if v == "hf" else pipeline_of(base, target_of(base, v, a)) for v in names}
    prompts = select_prompts(argparse.Namespace(prompts=None, categories=a.categories, limit=a.limit))
    runs = [(v, "ar") for v in names] + [(v, a.spec) for v in names if a.spec and v != "hf"]
    for v, m in runs:  # first-call costs outside the timings
        run(pipes[v], prompts[0], v, m, 4, None)
    rows = []
    for p in prompts:
        ars = {}  # a variant's speculative run is compared with its own plain decoding, the others' with the first's
        for v, m in runs:
            row, records = run(pipes[v], p, v, m, a.max_new_tokens, ars.get(v if m != "ar" else names[0]))
            ars[v] = records if m == "ar" else ars[v]
            rows.append({**{k: row[k] for k in ("new_tokens", "wall_s", "identical")}, "variant": v, "method": m})
            print(json.dumps(rows[-1] | {"prompt": p.id}), file=sys.stderr, flush=True)
    print(f"{a.model} <- {a.draft}; {len(prompts)} prompts x {a.max_new_tokens}; {a.threads} threads; "
          f"codes variants here: {', '.join(isa.codes_variants())}; shared machine: compare ratios")
    report(rows, names, runs, pipes, base, prompts[0])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def report(rows, names, runs, pipes, base, prompt) -> None:
    """tok/s per (variant, method), its ratio to packed and hf plain decoding, and step vs verify ms."""
    agg = {(v, m): aggregate([{**r, "method": m} for r in rows if (r["variant"], r["method"]) == (v, m)])
           for v, m in runs}
    ref = {k: agg.get((k, "ar")) for k in ("packed", "hf")}
    verify = int(dict(draft_defaults(base.model_id)).get("tree_size", 8)) + 1
    ids = base.prompt_ids(prompt.text)
    for v, m in runs:
        g = agg[(v, m)]
        mine = [r for r in rows if (r["variant"], r["method"]) == (v, m) and r["identical"] is not None]
        line = f"{v:<13} {m:<9} {g['tokens_per_s']:6.2f} tok/s"
        line += "".join(f"  x{k} {tps_ratio(g, r)}" for k, r in ref.items() if r and r["runs"])
        line += f"  x{v}-ar {tps_ratio(g, agg[(v, 'ar')])}" if m != "ar" else ""
        if mine:
            line += f"  identical to {'its own' if m != 'ar' else 'the first'} ar {sum(map(bool, (r['identical'] for r in mine)))}/{len(mine)}"
        print(line)
    for v in names:
        if v != "hf":
            one, ver = step_ms(pipes[v].target, ids, 1), step_ms(pipes[v].target, ids, verify)
            print(f"{v:<13} 1-token step {one:.1f} ms, {verify}-row verify {ver:.1f} ms ({ver / one:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
