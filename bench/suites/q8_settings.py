"""python -m bench q8-settings: q8_mm's memory and register settings side by side on a GGUF model's
own blocks (two layers and the head): a prefetch burst per group, a stream ahead or none, zmm pairing on or off, per
q8_mm variant and row count, interleaved, the least of --reps. The settings change no float (tests/test_gguf_q8.py);
only the time differs."""
import argparse

import torch

from bench import harness
from core.cost.store import machine
from core.kernels.cpu import cpu_layer, gguf_q8, isa
from core.models import fetch_gguf


def matrices(model: str, layers: tuple) -> dict:
    """{'head' | 'i.wqkv' ...: RawCodes} of the given layers (row order as first read: the time is the same)."""
    path = fetch_gguf(model)
    n_layers = 1 + max(int(t.split(".")[1]) for t in gguf_q8.tensor_table(path) if t.startswith("blk."))
    raw = gguf_q8.model_raw(path, n_layers, 1, 1)
    keep = {n: b for n, b in raw.items() if n == "head" or int(n.split(".")[0]) in layers}
    return {n: b[0]() if isinstance(b, list) else b for n, b in keep.items()}


def pass_ms(mats: dict, variant: str, rows: int) -> float:
    """ms of one pass over the matrices (each product timed alone, its input made outside the timing)."""
    t = 0.0
    for c in mats.values():
        x, cv = torch.randn(rows, c.k), c._replace(variant=variant)
        t += harness.clock(lambda x=x, cv=cv: gguf_q8.q8_mm(x, cv))[0]
    return t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench q8-settings")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 6, 9])
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    mats, lib = matrices(args.model, (3, 17)), cpu_layer.lib()
    memory = {"burst": (2048, 0), "none": (0, 0), "stream": (0, 2048)}  # (prefetch burst, stream distance) in bytes
    t, before = harness.Timings(), (lib.q8_prefetch_bytes(), lib.q8_stream_bytes(), lib.q8_pair_rows())
    for _ in range(args.reps):
        for rows in args.rows:
            for v in isa.q8_variants():
                for mem, pair in [(mem, pair) for mem in memory for pair in ((1, 99) if v == "avx512" else (99,))]:
                    lib.q8_set_prefetch(memory[mem][0]), lib.q8_set_stream(memory[mem][1]), lib.q8_set_pair_rows(pair)
                    t.add((rows, v, mem, pair), pass_ms(mats, v, rows))
    lib.q8_set_prefetch(before[0]), lib.q8_set_stream(before[1]), lib.q8_set_pair_rows(before[2])
    features = "/".join(machine()["features"])
    print(f"{args.model}: layers 3, 17 and the head; {features}; defaults here: prefetch burst {before[0]} B, "
          f"stream {before[1]} B ahead, zmm pairing from {before[2]} rows")
    print("rows variant  memory  paired       ms")
    for (rows, v, mem, pair) in sorted(t.keys()):
        ms = t.min((rows, v, mem, pair))
        print(f"{rows:4d} {v:8s} {mem:7s} {'yes' if pair == 1 else 'no':6s} {ms:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
