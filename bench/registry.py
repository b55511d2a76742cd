"""The benchmark door: python -m bench <suite> [options] | list. Each suite is a module with main(argv) and a
one-line description here; `list` prints them. Like the product's door (core/cli.py), a SpecError is one `error:`
line and exit status 2. Nothing in the product imports this package (tests/test_layering.py)."""
import importlib
import sys

from core.errors import one_line_errors

SUITES = {  # name -> (module whose main(argv) runs it, what it measures)
    "methods": ("bench.suites.methods", "methods × prompts: tok/s, τ, coverage, speedup over AR (--compare-ar: lossless)"),
    "pair": ("bench.suites.pair", "a target + draft pair's variants interleaved per prompt, transformers' and llama.cpp's"),
    "runtime": ("bench.suites.runtime", "eager vs fast runtime: target passes, the head's GEMV, greedy decoding"),
    "context": ("bench.suites.context", "context drafting beside plain decoding, NanoSpec and transformers' prompt lookup"),
    "isa": ("bench.suites.isa", "a GGUF target's decoding per CPU kernel variant, side by side"),
    "codes": ("bench.suites.codes", "codes_mm and q8_mm per kernel variant on a model's matrix shapes"),
    "q8-settings": ("bench.suites.q8_settings", "q8_mm's prefetch, stream and zmm pairing side by side"),
    "q8-revs": ("bench.suites.q8_revs", "q8_mm of this checkout beside a git revision's, bit-equal first"),
    "preview": ("bench.suites.preview", "NanoSpec's preview (lowrank_mm) and top-k per variant, beside torch"),
    "lm-head": ("bench.suites.lm_head", "the draft LM head's kernels: Triton vs torch over d × V × |I| × n"),
    "llamacpp": ("bench.llamacpp.cli", "llama.cpp as the peer: build | bench | tg | passes"),
    "auto-shape": ("bench.suites.auto_shape", "--shape auto against the fixed shapes it picks from (and a grid)"),
    "predicted-speedup": ("bench.suites.predicted_speedup", "the cost model's predicted speedups against measured runs"),
    "keep-drafts": ("bench.suites.keep_drafts", "A/B: a draft model keeping its accepted drafts or taking all in again"),
    "exact-rows": ("bench.suites.exact_rows", "A/B: plain decoding with the exact row padding and without"),
    "engine-thread": ("bench.suites.engine_thread", "A/B: torch work on the one engine thread against a fresh thread"),
    "context-step": ("bench.suites.context_step", "a step's time split: NanoSpec + context against the context alone"),
    "render-readme": ("bench.results", "rewrite README.md's results table from results/results.jsonl"),
}


def listing() -> str:
    width = max(map(len, SUITES))
    return "\n".join(f"{name:<{width}}  {desc}" for name, (_, desc) in SUITES.items())


def dispatch(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["list"]:
        print(listing())
        return 0
    if not argv or argv[0] not in SUITES:
        print("usage: python -m bench <suite> [options]  (--help on each; python -m bench list)\n" + listing(),
              file=sys.stderr)
        return 2
    return one_line_errors(lambda: importlib.import_module(SUITES[argv[0]][0]).main(argv[1:]))
