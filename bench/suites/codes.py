"""python -m bench codes: codes_mm and q8_mm per kernel variant on a model's matrix shapes, side by side.

Random Q4_K / Q6_K codes shaped like a GGUF Q4_K_M model's layers (default: Qwen2.5-Coder-1.5B: q|k|v, o, gate|up in
Q4_K, down in Q6_K, head 151936 × 1536 in Q6_K), `--layers` distinct layers so the codes stream from memory, and per
row count the ms of one pass over them for each variant this CPU runs (isa.codes_variants), interleaved, with oneDNN's
packed bf16 product of the same decoded weights beside them, and q8_mm (int8 activations on the same blocks) per
variant it has here (isa.q8_variants: `int8-avx512`, `int8-avxvnni`, `int8-avx2`). GB/s = codes bytes / time, against the read bandwidth
measured in the same run. A shared machine: compare within a run.
"""
import argparse

import numpy as np
import torch

from bench import harness
from core.kernels.cpu import gguf_codes as g
from core.kernels.cpu import gguf_q8 as q8
from core.kernels.cpu import isa

SHAPES = {"qwen2.5-1.5b": dict(d=1536, qkv=2048, ffn=8960, vocab=151936, layers=28)}


def random_blocks(kind: str, n: int, k: int, seed: int) -> np.ndarray:
    """Valid random GGUF blocks [n, k / 256 · bytes]: random codes and scales, small fp16 d (as tests/)."""
    rng = np.random.default_rng(seed)
    size = {"Q4_K": 144, "Q6_K": 210}[kind]
    raw = rng.integers(0, 256, (n, k // 256, size), dtype=np.uint8)
    d = (4e-5 * rng.uniform(0.5, 1.5, (n, k // 256, 2 if kind == "Q4_K" else 1))).astype(np.float16).view(np.uint8)
    raw[..., slice(0, 4) if kind == "Q4_K" else slice(208, 210)] = d.reshape(n, k // 256, -1)
    return raw.reshape(n, -1)


def layer_blocks(s: dict, seed: int) -> list:
    """One layer's four fused matrices as [(kind, blocks, n, k)]."""
    d, f = s["d"], s["ffn"]
    mats = [("Q4_K", s["qkv"], d), ("Q4_K", d, d), ("Q4_K", 2 * f, d), ("Q6_K", d, f)]
    return [(kind, random_blocks(kind, n, k, seed + i), n, k) for i, (kind, n, k) in enumerate(mats)]


def as_codes(blocks: tuple, variant: str):
    """A matrix's blocks as codes_mm's Codes, or as q8_mm's RawCodes for an `int8-...` variant."""
    if variant.startswith("int8-"):
        return q8.matrix_raw([(*blocks, None)])._replace(variant=variant.removeprefix("int8-"))
    return g.matrix_codes([blocks])._replace(variant=variant)


def product(c):
    return q8.q8_mm if isinstance(c, q8.RawCodes) else g.codes_mm


def timed(fn, reps: int) -> float:
    """Fastest of `reps` calls, seconds."""
    return harness.best(fn, reps, warmup=0) / 1e3


def layers_pass(cs: list, xs: tuple):
    """One pass over the layers' products (Codes, RawCodes, or oneDNN's packed copies): a function to time."""
    from core.runtime.weights import packed_mm
    if isinstance(cs[0], torch.Tensor):
        return lambda: [packed_mm(xs[i % 4 == 3], w) for i, w in enumerate(cs)]
    return lambda: [product(c)(xs[i % 4 == 3], c) for i, c in enumerate(cs)]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench codes", description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=list(SHAPES))
    p.add_argument("--layers", type=int, default=6, help="distinct layers timed (scaled to the model's count)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 9, 16])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--packed", action="store_true", help="also oneDNN's packed bf16 of the decoded weights")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    s = SHAPES[a.shape]
    variants = [v for v in isa.codes_variants() if v not in ("none", "amx")] + \
        (["amx"] if "amx" in isa.codes_variants() else []) + [f"int8-{v}" for v in isa.q8_variants()]
    blocks = [b for i in range(a.layers) for b in layer_blocks(s, 10 * i)]
    head_blocks = ("Q6_K", random_blocks("Q6_K", s["vocab"], s["d"], 999), s["vocab"], s["d"])
    mats = {v: [as_codes(b, v) for b in blocks] for v in variants}
    heads = {v: as_codes(head_blocks, v) for v in variants}
    if a.packed:
        from core.runtime.weights import pack
        mats["packed"] = [pack(g.decode(c)) for c in mats[variants[0]]]
        heads["packed"] = heads[variants[0]]
    scale = s["layers"] / a.layers
    layer_bytes, head = sum(c.nbytes for c in mats[variants[0]]), heads[variants[0]]
    from bench.bandwidth import read_gbs
    print(f"{a.shape}: {a.layers} distinct layers ({layer_bytes / 1e6:.0f} MB of codes), scaled to {s['layers']}; "
          f"head {head.nbytes / 1e6:.0f} MB; {a.threads} threads; variants {variants}; shared machine")
    print(f"{'rows':>4} {'variant':<12} {'layers ms':>10} {'head ms':>8} {'total ms':>9} {'codes GB/s':>10}")
    for m in a.rows:
        xs = (torch.randn(m, s["d"]).bfloat16(), torch.randn(m, s["ffn"]).bfloat16())  # inputs of d / of the down proj
        for v in mats:
            t_layers = timed(layers_pass(mats[v], xs), a.reps) * scale
            hv = heads[v]
            t_head = timed(lambda: product(hv)(xs[0], hv), a.reps)  # noqa: B023 (timed at once)
            total = t_layers + t_head
            read = sum(c.nbytes for c in mats[v]) * scale + hv.nbytes if v != "packed" else float("nan")
            gbs = read / total / 1e9
            print(f"{m:>4} {v:<12} {1e3 * t_layers:>10.1f} {1e3 * t_head:>8.1f} {1e3 * total:>9.1f} {gbs:>10.1f}",
                  flush=True)
    print(f"read bandwidth now: {read_gbs():.1f} GB/s")


if __name__ == "__main__":
    main()
