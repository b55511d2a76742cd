"""python -m bench runtime: eager (transformers) vs fast runtime, fp32 and bf16, side by side in one process.

Every timing interleaves the contenders rep by rep and reports the minimum (bench/harness.py: the machine may be
shared, the minimum is the best estimate of the uncontended cost, ratios are what to read). `--clock cpu` times
with this thread's CPU time instead of the wall clock: with `--threads 1` that drops the time spent
descheduled on a loaded machine (cache and memory-bandwidth contention still count). `--fast codes=0,one_call=0`
builds the fast runners with those FastConfig switches (the A/B); `--record` appends the greedy decoding's tok/s to
results/results.jsonl (bench/results.py).
"""
import argparse
import copy
import json
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from bench import harness
from core.runtime.fast import FastRunner
from core.runtime.runner import EagerRunner

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
    dtype: str = "fp32,bf16"  # the model dtypes to run, side by side (fp32 eager is the reference)
    json: str = ""
    fast: str = ""            # A/B: FastConfig switches of the fast runners, e.g. codes=0,one_call=0 (bench/options.py)
    record: bool = False      # append the greedy decoding's figures to results/results.jsonl


def parse(argv) -> BenchArgs:
    p = argparse.ArgumentParser(prog="python -m bench runtime", description=__doc__.splitlines()[0])
    for name, default in vars(BenchArgs()).items():
        if isinstance(default, bool):
            p.add_argument("--" + name.replace("_", "-"), action="store_true")
        else:
            p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return BenchArgs(**vars(p.parse_args(argv)))


TIMER = time.perf_counter


def clock(fn):
    return harness.clock(fn, TIMER)


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
    """{(runner, n): [(forward ms, head ms)] per rep}, the runners and sizes interleaved (one_pass times itself)."""
    sizes = [int(s) for s in a.sizes.split(",")]
    for r in runners.values():
        fill(r, ids, a.cache)
    passes = {(name, n): (lambda r=r, n=n: one_pass(r, ids, a.cache, n)) for n in sizes for name, r in runners.items()}
    t = harness.interleave(passes, a.reps, warmup=1, timer=TIMER)
    return {k: t.outputs[k] for k in passes}


def pass_table(times: dict, names, sizes) -> list:
    """Per runner: forward ms, forward + head ms, and forward + head relative to its own n = 1."""
    rows = ["| n | " + " | ".join(f"{x} fwd | {x} fwd+head | {x} vs n=1" for x in names) + " |",
            "|---" * (3 * len(names) + 1) + "|"]
    base = {x: min(f + h for f, h in times[(x, 1)]) for x in names}
    for n in sizes:
        best = {x: min(f + h for f, h in times[(x, n)]) for x in names}
        cells = [f"{min(f for f, _ in times[(x, n)]):.1f} | {best[x]:.1f} | {best[x] / base[x]:.2f}" for x in names]
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return rows


# ---------------------------------------------------------------- full-head GEMV

def bench_head(models: dict, runners: dict, reps: int) -> dict:
    """n = 1 full-vocab logits: transformers' F.linear(x, W) per model dtype and each fast runner's `logits`;
    GB/s counts the head's bytes in its own dtype."""
    runs = {}
    for name, model in models.items():
        W = model.get_output_embeddings().weight.detach()
        x = torch.randn(1, W.shape[1], dtype=W.dtype)
        runs[f"eager {name} F.linear(x, W)"] = (lambda x=x, W=W: F.linear(x, W)), W
    for k, r in runners.items():
        if not k.startswith("eager"):
            x = torch.randn(1, r.d, dtype=r.dtype)
            runs[f"{k}.logits"] = (lambda r=r, x=x: r.logits(x)), r.head_weight
    t = harness.interleave({k: fn for k, (fn, _) in runs.items()}, reps * 3, warmup=1, timer=TIMER)
    gb = {k: W.numel() * W.element_size() / 1e9 for k, (_, W) in runs.items()}
    return {k: (t.min(k), gb[k] / (t.min(k) / 1e3), gb[k] / (t.median(k) / 1e3)) for k in runs}


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


def common_prefix(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def bench_decode(models: dict, tok, runners: dict, a: BenchArgs) -> tuple:
    """tok/s of each runner's greedy loop and of transformers `generate` (plain and with prompt lookup) per
    model dtype; agreement = prompts identical to, and tokens before the first difference from, the first
    model's `generate` (fp32 eager: the reference)."""
    from core.models import chat_prompt_ids

    gen_cfg = next(iter(models.values())).generation_config
    eos = {gen_cfg.eos_token_id} if isinstance(gen_cfg.eos_token_id, int) else set(gen_cfg.eos_token_id or [])
    ways = {f"{k} runner greedy": (lambda p, r=r: greedy(r, p, a.new_tokens, eos)) for k, r in runners.items()}
    for name, model in models.items():
        ways[f"transformers generate {name}"] = lambda p, m=model: hf_generate(m, p, a.new_tokens)
        ways[f"transformers generate {name} + prompt lookup {a.lookup}"] = \
            lambda p, m=model: hf_generate(m, p, a.new_tokens, a.lookup)
    prompts = [chat_prompt_ids(tok, t) for t in PROMPTS]
    runs = {(k, i): (lambda fn=fn, p=p: fn(p)) for i, p in enumerate(prompts) for k, fn in ways.items()}
    t = harness.interleave(runs, 2, warmup=0, timer=TIMER)  # best of 2 per prompt, prompts and ways interleaved
    outs = {k: [t.outputs[(k, i)][-1] for i in range(len(prompts))] for k in ways}
    toks = {k: sum(len(o) for o in v) for k, v in outs.items()}
    rate = {k: toks[k] / (sum(t.min((k, i)) for i in range(len(prompts))) / 1e3) for k in ways}
    ref = outs[f"transformers generate {next(iter(models))}"]
    same = {k: (sum(o == r for o, r in zip(outs[k], ref)), sum(common_prefix(o, r) for o, r in zip(outs[k], ref)))
            for k in ways}
    return rate, toks, same, len(prompts)


# ---------------------------------------------------------------- main

def build(a: BenchArgs) -> tuple:
    """({dtype name: model}, tokenizer, {name: runner}, fast build seconds): per dtype the fast runner in its
    default layout (fp32: hybrid, on a copy of the model: it rebinds the model's params; bf16: packed), and for
    fp32 also the eager runner (the reference) and the blocked layout (both on the untouched model)."""
    from bench.options import fast_config
    from core.args import torch_dtype
    from core.models import load_model

    models, runners, build_s, fc = {}, {}, {}, fast_config(a)
    for name in a.dtype.split(","):
        model, tok = load_model(a.model, dtype=torch_dtype(name))
        models[name] = model
        if name == "fp32":
            runners["eager"] = EagerRunner(model, tok)
        own = copy.deepcopy(model) if name == "fp32" else model
        build_s[name], runners["fast" if name == "fp32" else f"fast-{name}"] = clock(lambda own=own, tok=tok: FastRunner(own, tok, fc))
        if name == "fp32":
            runners["fast-blocked"] = FastRunner(model, tok, replace(fc, layout="blocked"))
    return models, tok, runners, build_s


def main(argv=None) -> int:
    global TIMER
    a = parse(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    t_load, (models, tok, runners, build_s) = clock(lambda: build(a))
    TIMER = time.thread_time if a.clock == "cpu" else time.perf_counter
    print(f"# runtime: {a.model}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"cache {a.cache}, reps {a.reps}, clock {a.clock}")
    print(f"load + build {t_load / 1e3:.1f} s; fast runner build (re-layout) " +
          ", ".join(f"{k} {v / 1e3:.2f} s" for k, v in build_s.items()) + " (wall), no compile step")
    print("layouts: " + ", ".join(f"{k} {getattr(r, 'fast_cfg', None) and r.fast_cfg.layout or 'transformers'}"
                                  for k, r in runners.items()) + "\n")
    first = next(r for k, r in runners.items() if k != "eager")
    ids = torch.randint(3, first.vocab_size, (a.cache + 64,), generator=torch.Generator().manual_seed(0))
    sizes = [int(s) for s in a.sizes.split(",")]
    times = bench_passes(runners, ids, a)
    print(f"## target pass ms (min over {a.reps}), cache {a.cache}")
    print("\n".join(pass_table(times, list(runners), sizes)))
    print("\n## full-head GEMV (n=1)\n| path | ms (min) | GB/s (min) | GB/s (median) |\n|---|---|---|---|")
    head = bench_head(models, runners, a.reps)
    for k, (ms, gbs, gbs_med) in head.items():
        print(f"| {k} | {ms:.2f} | {gbs:.1f} | {gbs_med:.1f} |")
    rate, toks, same, n_p = bench_decode(models, tok, runners, a)
    ref = f"transformers generate {next(iter(models))}"
    print(f"\n## greedy decoding, {n_p} prompts x {a.new_tokens} new tokens (best of 2 per prompt); "
          f"agreement with `{ref}`")
    print("| method | tok/s | tokens | prompts identical | tokens before first difference | vs generate |\n"
          "|---|---|---|---|---|---|")
    for k in rate:
        print(f"| {k} | {rate[k]:.1f} | {toks[k]} | {same[k][0]}/{n_p} | {same[k][1]}/{toks[ref]} | "
              f"{rate[k] / rate[ref]:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "passes": {f"{k[0]}:{k[1]}": v for k, v in times.items()},
                       "head": head, "decode_tok_s": rate, "same": same}, f, indent=1)
    if a.record:
        from bench.results import append_row
        row = append_row("runtime", a.model, {name_of(k) + "_tok_s": round(v, 1) for k, v in rate.items()},
                         command="python -m bench runtime", argv=argv, threads=torch.get_num_threads())
        print(f"recorded in results/results.jsonl: {row['figures']}")
    return 0


def name_of(way: str) -> str:
    """'fast-bf16 runner greedy' -> fast_bf16; 'transformers generate fp32 + prompt lookup 10' -> generate_fp32_lookup."""
    way = way.replace(" runner greedy", "").replace("transformers generate", "generate").replace(" + prompt lookup", " lookup")
    return "_".join(w for w in way.replace("-", " ").split() if not w.isdigit())


if __name__ == "__main__":
    raise SystemExit(main())
