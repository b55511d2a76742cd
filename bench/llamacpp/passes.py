"""python -m bench llamacpp passes: what a verify of n rows costs, ours beside llama.cpp's, on the same GGUF.

Ours: the target's pass over n new rows after --depth committed tokens, logits of every row included (calibrate's
verify_pass, timed from the most rows down, the least of two rounds' medians). llama.cpp's: llama-bench's batch of n
tokens after --depth of context (-p n -d depth), which computes the logits of its last row only, so its figure is
if anything below a verify's. Each side is also given as a multiple of its own 1-row pass: the cost of a verify in
plain steps, the figure speculation divides its accepted tokens by.
"""
import argparse

import torch

from core.cost.store import machine
from core.errors import SpecError
from bench.llamacpp import build as llamacpp_build, run as llamacpp_run
from bench.llamacpp.compare import gguf_of


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench llamacpp passes",
                                description="a pass over n rows, ours beside llama.cpp's, and each over its 1-row pass")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--rows", default="1,2,4,9,16", help="comma list of row counts (1 is always added)")
    p.add_argument("--depth", type=int, default=64, help="tokens of context before the pass")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    return p.parse_args(argv)


def our_passes(model: str, rows: list, depth: int, reps: int) -> tuple:
    """({n: ms of our target's pass over n rows after depth tokens}, the runtime's note)."""
    from core.cost.probe import ms_rounds, verify_pass
    from core.pipeline import Pipeline
    pipe = Pipeline.load(model, draft="context")
    verify = verify_pass(pipe, depth, pipe.prompt_ids("Write a function that merges two sorted lists."))
    timed = ms_rounds([lambda n=n: verify(n) for n in reversed(rows)], reps)[::-1]
    return dict(zip(rows, timed)), pipe.runtime_note


def peer_passes(model: str, rows: list, depth: int, threads: int, reps: int) -> dict:
    """{n: ms of llama-bench's batch of n tokens after depth tokens, or the reason it has none}."""
    out, gguf = {}, gguf_of(model)
    for n in rows:
        try:
            stdout, _ = llamacpp_run.call(llamacpp_run.pass_args(gguf, n, threads, reps, depth))
            tps = llamacpp_run.parse_bench(stdout)[llamacpp_run.test_name(n, 0, depth)]
            out[n] = 1000 * n / tps
        except llamacpp_run.Crashed as err:  # this llama.cpp's AMX-repacked kernels crash on a batch of 2+
            out[n] = f"crashed ({err})"
    return out


def cell(ms, one) -> tuple:
    return (f"{ms:.1f}", f"{ms / one:.2f}") if isinstance(ms, float) and isinstance(one, float) else (str(ms), "")


def passes_main(argv=None) -> int:
    args = parse(argv)
    if not llamacpp_build.built():
        raise SpecError(llamacpp_build.not_built())
    rows = sorted({1, *(int(r) for r in args.rows.split(","))})
    torch.set_num_threads(args.threads)
    ours, note = our_passes(args.model, rows, args.depth, args.reps)
    peer = peer_passes(args.model, rows, args.depth, args.threads, args.reps)
    m = machine()
    print(f"{args.model} after {args.depth} tokens, {args.threads} threads; {m['cpu']}: {'/'.join(m['features'])}; "
          f"ours: {note}; llama.cpp build: {llamacpp_build.peer_flavor()}")
    print(f"{'rows':>4} {'ours ms':>9} {'x 1 row':>8} {'llama.cpp ms':>13} {'x 1 row':>8}")
    for n in rows:
        o, p = cell(ours[n], ours[1]), cell(peer[n], peer[1])
        print(f"{n:4d} {o[0]:>9} {o[1]:>8} {p[0]:>13} {p[1]:>8}")
    return 0
