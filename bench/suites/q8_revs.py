"""python -m bench q8-revs --against REV: q8_mm of this checkout's kernels beside those of a git
revision, in one process on a GGUF model's own blocks (two layers and the head), interleaved per row count, the least
of --reps; the products are compared bit for bit first (a kernel change that moves a float is not a speed change)."""
import argparse
import ctypes
import subprocess
import tempfile
from pathlib import Path

import torch

from bench import harness
from bench.suites.q8_settings import matrices
from core.cost.store import machine
from core.errors import SpecError
from core.kernels.cpu import build, cpu_layer, gguf_q8, isa

ROOT = Path(__file__).resolve().parents[2]


def build_rev(rev: str) -> ctypes.CDLL:
    """The kernels' sources as of rev, compiled as cpu_layer compiles this checkout's, loaded with its signatures."""
    d = Path(tempfile.mkdtemp(prefix="speclens-rev-"))
    for f in build.SOURCES + build.HEADERS:
        rel = Path(f).resolve().relative_to(ROOT).as_posix()
        got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True)
        if got.returncode:
            raise SpecError(f"{rev}: no {rel} at that revision ({got.stderr.decode().strip()})")
        (d / Path(rel).name).write_bytes(got.stdout)
    so = d / "cpu_layer.so"
    build.compile_so(build.compiler(), so, build.level(), [d / Path(f).name for f in build.SOURCES])
    return cpu_layer.load(so, missing_ok=True)


def products(lib, mats: dict, xs: dict) -> tuple[dict, dict]:
    """({matrix: y}, {matrix: ms}) of one pass over the matrices with the library lib."""
    cpu_layer.lib, ys, ms = (lambda: lib), {}, {}
    for n, c in mats.items():
        ms[n], ys[n] = harness.clock(lambda c=c, x=xs[n]: gguf_q8.q8_mm(x, c))
    return ys, ms


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench q8-revs")
    p.add_argument("--against", default="HEAD", help="the git revision whose kernels run beside this checkout's")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 9, 16])
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    here, libs = cpu_layer.lib, {"rev": build_rev(args.against), "here": cpu_layer.lib()}
    isa.q8_variants()  # cached from this checkout's library before the swaps
    mats, t = matrices(args.model, (3, 17)), harness.Timings()
    try:
        for rows in args.rows:
            xs = {n: torch.randn(rows, c.k) for n, c in mats.items()}
            a, b = (products(libs[k], mats, xs)[0] for k in ("rev", "here"))
            if not all(torch.equal(a[n], b[n]) for n in mats):
                raise SpecError(f"{rows} rows: the products differ from {args.against}'s")
        for _ in range(args.reps):
            for rows in args.rows:
                xs = {n: torch.randn(rows, c.k) for n, c in mats.items()}
                for k, lib in libs.items():
                    for n, ms in products(lib, mats, xs)[1].items():
                        t.add((rows, k, n), ms)
    finally:
        cpu_layer.lib = here
    print(f"{args.model}: layers 3, 17 and the head; {'/'.join(machine()['features'])}; variant {isa.q8_variant()}; "
          f"products bit-equal to {args.against}'s at {args.rows} rows")
    print(f"rows matrix       {args.against[:10]:>10} ms  this ms  this/rev")
    for rows in args.rows:
        for n in [*mats, "all"]:
            r, h = (sum(t.min((rows, k, m)) for m in mats) if n == "all" else t.min((rows, k, n)) for k in libs)
            print(f"{rows:4d} {n:12s} {r:13.3f} {h:8.3f} {h / r:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
