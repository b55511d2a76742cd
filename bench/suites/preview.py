"""python -m bench preview: the parts of NanoSpec's preview and stream upkeep that scan the whole
vocabulary, on a model's shipped own factors (--model; the 0.5B's W_up [151936, 112] by default): lowrank_mm per
variant and row count, each call after a 64 MB sweep of the caches (as in the engine, where the target's pass evicts
W_up), and cpu_layer.topk beside torch.topk. Mean ms of --reps calls; the CPU features and threads come with the
figures. --against REV: lowrank_mm of that git revision's kernels beside this checkout's, alternating call by call in
this process, after a check that both give the same floats."""
import argparse
from functools import partial

import torch
from safetensors.torch import load_file

from bench import harness
from bench.suites.q8_revs import build_rev
from core.cost.store import machine
from core.errors import SpecError
from core.kernels.cpu import cpu_layer, isa, lowrank_mm
from core.models import load_model
from core.pipeline import head_dir, read_slim


def shipped_up(model_id: str) -> torch.Tensor:
    """bf16 W_up of the model's shipped slim_own factors (tied rows rebuilt over its LM head)."""
    path = next(iter(sorted(head_dir(model_id).glob("slim_own_r*.safetensors"))), None)
    if path is None:
        raise SpecError(f"no slim_own factors shipped for {model_id} in {head_dir(model_id)}")
    sd = load_file(str(path))
    if "W_up" in sd:
        return sd["W_up"].bfloat16()
    model, _ = load_model(model_id, device="cpu", dtype=torch.bfloat16)
    return read_slim(path, model.get_output_embeddings().weight.detach())[0]


def mean_ms(f, reps: int) -> float:
    return harness.interleave({0: f}, reps, warmup=1).mean(0)


def lowrank_rows(up: torch.Tensor, rows: list, reps: int, libs: dict) -> None:
    """Per variant and row count: each library's mean ms after a sweep of the caches, the libraries alternating."""
    sweep, here = torch.ones(64 << 20, dtype=torch.uint8), cpu_layer.lib
    try:
        for variant in isa.lowrank_variants():
            packed = lowrank_mm.PackedUp(up, variant)
            for n in rows:
                z = torch.randn(n, up.shape[1])
                outs = {k: use(lib, packed, z) for k, lib in libs.items()}
                if any(not torch.equal(y, outs["here"]) for y in outs.values()):
                    raise SpecError(f"lowrank_mm {variant}, {n} rows: the revisions' floats differ")
                calls = {k: partial(use, lib, packed, z) for k, lib in libs.items()}
                t = harness.interleave(calls, reps, warmup=0, before=lambda _: sweep.add_(1))  # caches swept, untimed
                ms = {k: t.mean(k) for k in libs}
                ratios = "".join(f"  here / {k}: {ms['here'] / t:.2f}" for k, t in ms.items() if k != "here")
                print(f"lowrank_mm {variant:<6} rows {n:2d}: " + "  ".join(f"{k} {t:6.3f} ms" for k, t in ms.items())
                      + ratios)
    finally:
        cpu_layer.lib = here


def use(lib, packed, z):
    cpu_layer.lib = lambda: lib
    return packed(z)


def topk_rows(V: int, ks: list, rows: int, reps: int) -> None:
    x = torch.randn(rows, V)
    for k in ks:
        ours, theirs = mean_ms(partial(cpu_layer.topk, x, k), reps), mean_ms(partial(x.topk, k, dim=-1), reps)
        print(f"top-{k} of {rows} x {V}: cpu_layer.topk {ours:6.3f} ms  torch.topk {theirs:6.3f} ms  "
              f"({theirs / ours:.1f}x)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench preview")
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="whose shipped slim_own factors")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 3, 8])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--against", default=None, help="a git revision whose lowrank_mm runs beside this checkout's")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    m = machine()
    print(f"{m['cpu']}, {'/'.join(m['features'])}, {args.threads} threads, cap {m['isa_cap'] or 'none'}")
    if cpu_layer.lib() is None or not isa.lowrank_variants():
        print(f"the C kernels do not run here: {cpu_layer.why_not() or 'no AVX2 + FMA'}")
        return 1
    up = shipped_up(args.model)
    libs = {"here": cpu_layer.lib()} | ({args.against: build_rev(args.against)} if args.against else {})
    lowrank_rows(up, args.rows, args.reps, libs)
    topk_rows(up.shape[0], [16, 64], 3, args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
