"""python -m bench llamacpp build | bench | tg | passes: llama.cpp as a benchmark peer, never a runtime dependency.

`build` (bench/llamacpp/build.py) compiles the `vendor/llama.cpp` tree of the llama-cpp-python source
package (pip's ordinary client fetches it) with cmake + ninja, Release, native CPU, only the tools the benchmarks run,
into `cache_root()/llamacpp/<version>/bin`; it is idempotent and resumable (ninja picks up where it stopped), with its
progress in `build.log` there. `binary(name)` is the only way the benchmarks find a tool: SpecError if not built.
The runners: run.py; the `llamacpp bench` suite and the pair suite's llama.cpp variants: compare.py; a verify's pass
beside llama.cpp's batch of as many tokens: passes.py.
"""
import argparse
import sys

from bench.llamacpp.build import build
from core.errors import SpecError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench llamacpp")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the llama.cpp tools into the cache (idempotent, resumable)")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--flavor", choices=("native", "avx512", "avx2"), default="native",
                   help="native: every feature of this CPU; avx512: AVX-512 + VNNI + BF16, no AMX (the peer under "
                        "SPECLENS_CPU_ISA=avx512); avx2: AVX2 + FMA only (the peer under SPECLENS_CPU_ISA=avx2)")
    sub.add_parser("bench", help="our AR beside llama.cpp, interleaved per prompt (see compare.py)", add_help=False)
    sub.add_parser("tg", help="llama-bench's tg tok/s of each model's GGUF", add_help=False)
    sub.add_parser("passes", help="a pass over n rows, ours beside llama.cpp's (see passes.py)", add_help=False)
    args, rest = p.parse_known_args(argv)
    try:
        if args.cmd == "build":
            print(build(args.jobs, flavor=args.flavor))
            return 0
        from bench.llamacpp.compare import bench_main, tg_main
        from bench.llamacpp.passes import passes_main
        return {"bench": bench_main, "tg": tg_main, "passes": passes_main}[args.cmd](rest)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
