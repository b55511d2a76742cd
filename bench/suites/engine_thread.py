"""Why the app runs every torch job on one engine thread (core/engine_thread.py): OpenMP regions from a second
thread that runs torch, and the app's LiveRun against the command line's run on the same thread, in one process
(default model, default prompt, NanoSpec, 64 tokens): python -m bench engine-thread."""
import argparse
import threading

import torch

import core.engine_thread as engine_thread
from bench import harness
from core.config import SpecConfig
from core.prompts import example_prompts
from core.trace.live import LiveRun, run_to_end


def op_us(x, n=3000) -> float:
    """Mean µs of one elementwise op on x, after 200 untimed ones."""
    torch.set_num_threads(2)
    return harness.interleave({0: lambda: [x.mul_(1.0) for _ in range(n)]}, 1, warmup=0,
                              before=lambda _: [x.mul_(1.0) for _ in range(200)]).min(0) / n * 1e3


def on_new_thread(fn, *args):
    out = []
    th = threading.Thread(target=lambda: out.append(fn(*args)))
    th.start()
    th.join()
    return out[0]


def tps(trace) -> float:
    s = trace["meta"]["summary"]
    return s["new_tokens"] / trace["meta"]["gen_s"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench engine-thread", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    x = torch.randn(200_000)
    print(f"elementwise op, 200k floats: engine thread {engine_thread.call(op_us, x):.1f} us, "
          f"a second thread {on_new_thread(op_us, x):.1f} us, engine thread again {engine_thread.call(op_us, x):.1f} us")
    from core.pipeline import Pipeline

    pipe = engine_thread.call(Pipeline.load)
    prompt, cfg = example_prompts()[0].text, SpecConfig(method="nanospec", max_new_tokens=args.tokens)
    engine_thread.call(run_to_end, pipe, prompt, cfg)  # warm-up
    for rnd in range(args.rounds):
        a = engine_thread.call(run_to_end, pipe, prompt, cfg)
        b = LiveRun(pipe, prompt, cfg).start().result()
        c = on_new_thread(run_to_end, pipe, prompt, cfg)
        print(f"round {rnd}: tok/s run_to_end on the engine {tps(a):.1f}, LiveRun {tps(b):.1f}, "
              f"a fresh thread per run (before) {tps(c):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
