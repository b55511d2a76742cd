"""Run as `PYTHONPATH=. python tests/ab_engine_thread.py`. Why the app runs every torch job on one engine thread
(core/engine_thread.py): OpenMP regions from a second thread that runs torch, and the app's LiveRun against
the command line's run on the same thread, in one process (default model, default prompt, NanoSpec, 64 tokens)."""
import threading
import time

import torch

import core.engine_thread as engine_thread
from core.config import SpecConfig
from core.prompts import example_prompts
from core.trace.live import LiveRun, run_to_end

torch.set_num_threads(2)
x = torch.randn(200_000)


def op_us(n=3000) -> float:
    torch.set_num_threads(2)
    for _ in range(200):
        x.mul_(1.0)
    t = time.perf_counter()
    for _ in range(n):
        x.mul_(1.0)
    return (time.perf_counter() - t) / n * 1e6


def on_new_thread(fn, *args):
    out = []
    th = threading.Thread(target=lambda: out.append(fn(*args)))
    th.start()
    th.join()
    return out[0]


def tps(trace) -> float:
    s = trace["meta"]["summary"]
    return s["new_tokens"] / trace["meta"]["gen_s"]


print(f"elementwise op, 200k floats: engine thread {engine_thread.call(op_us):.1f} us, "
      f"a second thread {on_new_thread(op_us):.1f} us, engine thread again {engine_thread.call(op_us):.1f} us")
from core.pipeline import Pipeline  # noqa: E402

pipe = engine_thread.call(Pipeline.load)
prompt, cfg = example_prompts()[0].text, SpecConfig(method="nanospec", max_new_tokens=64)
engine_thread.call(run_to_end, pipe, prompt, cfg)  # warm-up
for rnd in range(3):
    a = engine_thread.call(run_to_end, pipe, prompt, cfg)
    b = LiveRun(pipe, prompt, cfg).start().result()
    c = on_new_thread(run_to_end, pipe, prompt, cfg)
    print(f"round {rnd}: tok/s run_to_end on the engine {tps(a):.1f}, LiveRun {tps(b):.1f}, "
          f"a fresh thread per run (before) {tps(c):.1f}")
