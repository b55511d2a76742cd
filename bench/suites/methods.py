"""python -m bench methods --out DIR: many prompts × methods in one process, side by side, resumable.

The runner is the product's (core/paper/runs.py, the one the paper figures build on): DIR/runs.jsonl (one line per
finished prompt × method; a rerun skips them), DIR/steps.csv and DIR/summary.csv (per category × method, plus `all`),
speedups as ratios to the plain AR run of the same prompts in the same process, `--compare-ar` the lossless verdict.
This suite prints the summary table. The paper's figures: `python -m core bench --figures DIR`.
"""
import sys

from core.errors import SpecError
from core.paper.runs import parse, print_table, run_bench


def main(argv=None) -> int:
    args = parse(argv, prog="python -m bench methods")
    if args.figures:
        raise SpecError("--figures: the paper's figures are the product's: python -m core bench --figures DIR")
    summary = run_bench(args)
    print_table(summary)
    print(f"\nwrote {args.out}/summary.csv, steps.csv, runs.jsonl", file=sys.stderr)
    return 0
