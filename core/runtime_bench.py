"""python -m core bench-runtime: eager (transformers) vs fast runtime, side by side in one process.

Every timing interleaves the contenders rep by rep and reports the minimum (the machine may be shared:
the minimum is the best estimate of the uncontended cost, ratios are what to read). `--clock cpu` times
with this thread's CPU time instead of the wall clock: with `--threads 1` that drops the time spent
descheduled on a loaded machine (cache and memory-bandwidth contention still count).
"""
import argparse
import copy
import json
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.runtime import FastConfig, FastRunner
from core.runner import EagerRunner

PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Explain in three sentences why the sky is blue.",
    "List five fruits and one fact about each of them.",
)


@dataclass
class BenchArgs:
    model: str = "smollm2-135m-instruct"
    threads: int = 0          # 0 = torch default
    reps: int = 9
    cache: int = 200
    sizes: str = "1,2,4,8,12,16"
    new_tokens: int = 48
    lookup: int = 10          # prompt_lookup_num_tokens for the second generate row
    clock: str = "wall"       # wall | cpu (this thread's CPU time; use with --threads 1)
    json: str = ""


def parse(argv) -> BenchArgs:
    p = argparse.ArgumentParser(prog="python -m core bench-runtime", description=__doc__.splitlines()[0])
    for name, default in vars(BenchArgs()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return BenchArgs(**vars(p.parse_args(argv)))


TIMER = time.perf_counter


def clock(fn):
    t = TIMER()
    out = fn()
    return (TIMER() - t) * 1e3, out


def summary(ms: list) -> tuple:
    return min(ms), statistics.median(ms)


# ---------------------------------------------------------------- target passes

def fill(runner, ids, n_cache: int):
    runner.reset()
    runner.forward(ids[:n_cache], torch.arange(n_cache))
    runner.commit(torch.arange(n_cache))


def one_pass(runner, ids, n_cache: int, n: int):
    """(forward ms, head ms) of an n-token chain verify over an n_cache-token cache; pending dropped."""
    new, pos = ids[n_cache:n_cache + n], torch.arange(n_cache, n_cache + n)
    t_fwd, (hid, _) = clock(lambda: runner.forward(new, pos))
    t_head, _ = clock(lambda: runner.logits(hid))
    runner.commit(torch.zeros(0, dtype=torch.long))
    return t_fwd, t_head


def bench_passes(runners: dict, ids, a: BenchArgs) -> dict:
    sizes = [int(s) for s in a.sizes.split(",")]
    for r in runners.values():
        fill(r, ids, a.cache)
        one_pass(r, ids, a.cache, 1)
    times = {(name, n): [] for name in runners for n in sizes}
    for _ in range(a.reps):
        for n in sizes:
            for name, r in runners.items():
                times[(name, n)].append(one_pass(r, ids, a.cache, n))
    return times


def pass_table(times: dict, names, sizes) -> list:
    rows = ["| n | " + " | ".join(f"{x} fwd | {x} fwd+head" for x in names) + " | fast/eager (fwd+head) "
            "| fast vs its n=1 |", "|---" * (2 * len(names) + 3) + "|"]
    base = {x: min(f + h for f, h in times[(x, 1)]) for x in names}
    for n in sizes:
        best = {x: min(f + h for f, h in times[(x, n)]) for x in names}
        cells = [f"{min(f for f, _ in times[(x, n)]):.1f} | {best[x]:.1f}" for x in names]
        rows.append(f"| {n} | " + " | ".join(cells) +
                    f" | {best['fast'] / best['eager']:.2f} | {best['fast'] / base['fast']:.2f} |")
    return rows


# ---------------------------------------------------------------- full-head GEMV

def bench_head(model, runners: dict, reps: int) -> dict:
    """n = 1 full-vocab logits: transformers' F.linear(x, W) and each fast runner's `logits`."""
    W = model.get_output_embeddings().weight.detach()
    x = torch.randn(1, W.shape[1], dtype=W.dtype)
    gb = W.numel() * W.element_size() / 1e9
    runs = {"eager F.linear(x, W)": lambda: F.linear(x, W)}
    runs.update({f"{k}.logits": (lambda r=r: r.logits(x)) for k, r in runners.items() if k != "eager"})
    ms = {k: [] for k in runs}
    for _ in range(reps * 3):
        for k, fn in runs.items():
            ms[k].append(clock(fn)[0])
    return {k: (min(v), gb / (min(v) / 1e3), gb / (statistics.median(v) / 1e3)) for k, v in ms.items()}


# ---------------------------------------------------------------- greedy decoding

def greedy(runner, prompt: list, n_new: int, eos) -> list:
    runner.reset()
    ids = torch.tensor(prompt)
    hid, _ = runner.forward(ids, torch.arange(len(ids)))
    runner.commit(torch.arange(len(ids)))
    out = []
    for _ in range(n_new):
        tok = int(runner.logits(hid[-1:]).argmax(-1))
        out.append(tok)
        if tok in eos:
            break
        p = runner.n_committed
        hid, _ = runner.forward(torch.tensor([tok]), torch.tensor([p]))
        runner.commit(torch.tensor([0]))
    return out


def hf_generate(model, prompt: list, n_new: int, lookup: int = 0) -> list:
    ids = torch.tensor([prompt])
    kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n_new, do_sample=False,
                             **kw)
    return out[0, len(prompt):].tolist()


def bench_decode(model, tok, runners: dict, a: BenchArgs) -> tuple:
    from core.models import chat_prompt_ids

    eos = {model.generation_config.eos_token_id} if isinstance(model.generation_config.eos_token_id, int) \
        else set(model.generation_config.eos_token_id or [])
    ways = {f"{k} runner greedy": (lambda p, r=r: greedy(r, p, a.new_tokens, eos)) for k, r in runners.items()}
    ways["transformers generate"] = lambda p: hf_generate(model, p, a.new_tokens)
    ways[f"transformers generate + prompt lookup {a.lookup}"] = lambda p: hf_generate(model, p, a.new_tokens, a.lookup)
    prompts = [chat_prompt_ids(tok, t) for t in PROMPTS]
    best = {k: [float("inf")] * len(prompts) for k in ways}
    outs = {k: [None] * len(prompts) for k in ways}
    for _ in range(2):
        for i, p in enumerate(prompts):
            for k, fn in ways.items():
                ms, out = clock(lambda: fn(p))
                best[k][i], outs[k][i] = min(best[k][i], ms), out
    toks = {k: sum(len(o) for o in v) for k, v in outs.items()}
    rate = {k: toks[k] / (sum(best[k]) / 1e3) for k in ways}
    same = {k: sum(o == r for o, r in zip(outs[k], outs["transformers generate"])) for k in ways}
    return rate, toks, same, len(prompts)


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    from core.models import load_model

    global TIMER
    a = parse(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    t_load, (model, tok) = clock(lambda: load_model(a.model))
    t_build, fast = clock(lambda: FastRunner(model, tok, FastConfig(layout="blocked")))  # model untouched
    hybrid = FastRunner(copy.deepcopy(model), tok, FastConfig(layout="hybrid"))  # rebinds its model's params
    eager = EagerRunner(model, tok)
    TIMER = time.thread_time if a.clock == "cpu" else time.perf_counter
    runners = {"eager": eager, "fast": fast, "fast-hybrid": hybrid}
    print(f"# bench-runtime: {a.model}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"cache {a.cache}, reps {a.reps}, clock {a.clock}")
    print(f"load {t_load / 1e3:.1f} s; fast runner build (blocked re-layout) {t_build / 1e3:.2f} s (wall), "
          "no compile step\nfast = blocked layout (the default), fast-hybrid = plain GEMV for n=1, blocked for n>1\n")
    ids = torch.randint(3, fast.vocab_size, (a.cache + 64,), generator=torch.Generator().manual_seed(0))
    sizes = [int(s) for s in a.sizes.split(",")]
    times = bench_passes(runners, ids, a)
    print(f"## target pass ms (min over {a.reps}), cache {a.cache}")
    print("\n".join(pass_table(times, list(runners), sizes)))
    print("\n## full-head GEMV (n=1)\n| layout | ms (min) | GB/s (min) | GB/s (median) |\n|---|---|---|---|")
    head = bench_head(model, runners, a.reps)
    for k, (ms, gbs, gbs_med) in head.items():
        print(f"| {k} | {ms:.2f} | {gbs:.1f} | {gbs_med:.1f} |")
    rate, toks, same, n_p = bench_decode(model, tok, runners, a)
    print(f"\n## greedy decoding, {n_p} prompts x {a.new_tokens} new tokens (best of 2 per prompt)")
    print("| method | tok/s | tokens | same tokens as generate | vs generate |\n|---|---|---|---|---|")
    for k in rate:
        print(f"| {k} | {rate[k]:.1f} | {toks[k]} | {same[k]}/{n_p} | {rate[k] / rate['transformers generate']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "passes": {f"{k[0]}:{k[1]}": v for k, v in times.items()},
                       "head": head, "decode_tok_s": rate, "same": same}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
