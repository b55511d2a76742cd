"""python -m tools.device_check --out DIR [--minutes M] [--tiny] [--steps a,b,...]: the GPU programme in one command.

Steps, in order, each time-boxed (a share of what is left of --minutes, enforced by an alarm), each writing its
files under DIR as it goes, so a cut run keeps every finished step and row:
    env            env.json: device, GPU name, torch / triton / CUDA / transformers versions, copy GB/s
    kernels        kernels.csv + kernels.md (the table of docs/kernels.md) + kernels_goals.csv
    lossless_tiny  lossless_tiny.csv: every method vs AR greedy, chain and tree, on a tiny random model
    weights        weights.json: the default model loads (a reassembled GGUF converts here); --tiny: the chunk path
    lossless       lossless.csv: the same on the default model (shipped prompts x --max-new-tokens)
    train          train/ (EAGLE head + card, fp16 safetensors, SlimSpec factors), tau.csv, train.json
    paper          paper/: the paper-figure grid, reduced to the time left
status.json (per step: ok | timeout | error, seconds, note) and summary.md are rewritten after every step.
--tiny: the same steps on a tiny random model on the CPU (Triton rows in the interpreter: TRITON_INTERPRET=1).
"""
import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import SpecError
from core.paths import append_csv, write_atomic
from tools.alarm import StepTimeout, alarm

STEPS = ("env", "kernels", "lossless_tiny", "weights", "lossless", "train", "paper")
WEIGHT = {"env": 0.3, "kernels": 2, "lossless_tiny": 0.7, "weights": 1, "lossless": 2, "train": 6, "paper": 3}
LOSSLESS_COLS = ["model", "device", "dtype", "draft", "prompt_id", "category", "method", "shape", "identical",
                 "tie", "first_diff", "new_tokens", "tau", "wall_s"]
KERNEL_COLS = ["d", "V", "I", "n", "method", "time_us", "gbps", "pct_copy"]
GOAL_COLS = ["d", "V", "I", "n", "triton_pct_copy", "speedup_vs_index_select"]


@dataclass
class Check:
    out: Path
    tiny: bool
    device: str
    minutes: float
    max_new: int
    data: str | None
    train_minutes: float
    work: Path            # big intermediates (the feature cache, checkpoints): never under out
    t_end: float = 0.0
    deadline: float = 0.0
    status: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)   # what later steps reuse (seconds per generation, ...)
    draw: object = None   # the paper figures' drawing (viz.paper.draw_figures), handed in by the command line

    def left(self) -> float:
        """Seconds left in the current step."""
        return self.deadline - time.monotonic()

    @property
    def model_id(self) -> str:
        from core.models import DEFAULT_MODEL
        return str(self.tiny_dir) if self.tiny else DEFAULT_MODEL

    @property
    def tiny_dir(self) -> Path:
        from tools.device_tiny import save_tiny
        return save_tiny(self.out / "tiny_model")

    def prompts(self, n=None) -> list:
        """Shipped prompts, round robin over categories (a cut run still spans them)."""
        from core.prompts import load_prompts
        ps = load_prompts()
        cats = list(dict.fromkeys(p.category for p in ps))
        by = [[p for p in ps if p.category == c] for c in cats]
        out = [b[i] for i in range(max(map(len, by))) for b in by if i < len(b)]
        return out[:n] if n else out


# ---------------------------------------------------------------- running the steps

def run_steps(ck: Check, steps) -> dict:
    ck.t_end = time.monotonic() + ck.minutes * 60
    for i, name in enumerate(steps):
        budget = step_budget(ck, name, steps[i:])
        run_one(ck, name, budget)
    return ck.status


def step_budget(ck: Check, name: str, todo) -> float:
    """This step's share of the time left, by WEIGHT over the steps still to run; train at most --train-minutes."""
    left = max(ck.t_end - time.monotonic(), 0.0)
    share = left * WEIGHT[name] / sum(WEIGHT[s] for s in todo)
    return min(share, ck.train_minutes * 60) if name == "train" else share


def run_one(ck: Check, name: str, budget: float) -> None:
    t0 = time.monotonic()
    ck.deadline = t0 + budget
    note = ""
    try:
        with alarm(budget + 15):  # the step's own checks stop it first; the alarm only cuts a stuck one
            note = STEP_FNS[name](ck) or ""
        state = "ok"
    except StepTimeout:
        state = "timeout"
    except Exception as e:  # one step failing must not cost the steps after it
        state, note = "error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if os.environ.get("SPECLENS_DEBUG"):
            raise
    ck.status[name] = {"status": state, "seconds": round(time.monotonic() - t0, 1), "budget_s": round(budget, 1),
                       "note": note}
    print(f"device-check {name}: {state} in {ck.status[name]['seconds']} s {note}", flush=True)
    write_atomic(ck.out / "status.json", json.dumps(ck.status, indent=1))
    write_atomic(ck.out / "summary.md", summary_text(ck))


def write_json(ck: Check, name: str, data: dict) -> None:
    write_atomic(ck.out / name, json.dumps(data, indent=1, default=str))


# ---------------------------------------------------------------- env

def step_env(ck: Check) -> str:
    import torch
    import transformers
    from bench.suites import lm_head as bench
    from core.kernels.triton import interpreting
    dev = torch.device(ck.device)
    env = {"device": str(dev), "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
           "capability": list(torch.cuda.get_device_capability(dev)) if dev.type == "cuda" else None,
           "torch": torch.__version__, "cuda": torch.version.cuda, "triton": _version("triton"),
           "transformers": transformers.__version__, "python": platform.python_version(),
           "cpus": os.cpu_count(), "triton_interpret": interpreting(), "tiny": ck.tiny,
           "copy_gbps": round(bench.copy_gbps(dev, 2 if ck.tiny else 20), 1)}
    ck.facts["copy_gbps"] = env["copy_gbps"]
    write_json(ck, "env.json", env)
    return f"{env['gpu'] or 'CPU'}, copy {env['copy_gbps']} GB/s"


def _version(pkg: str):
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------- kernels

def kernel_argv(ck: Check) -> list:
    if ck.tiny:
        return ["--device", "cpu", "--dtype", "fp32", "--d", "64", "--V", "512", "--I", "128", "--n", "1", "--reps", "1",
                "--moved", "8"]
    return ["--device", ck.device, "--d", "4096", "576", "2048", "--V", "128256", "49152", "--I", "3072", "1024",
            "--n", "1", "10"]


def step_kernels(ck: Check) -> str:
    import torch
    from bench.suites import lm_head as bench
    from core.kernels.triton import interpreting, triton_installed
    args = bench.parse_args(kernel_argv(ck))
    device, dtype = torch.device(args.device), bench.DTYPES[args.dtype]
    copy = ck.facts.get("copy_gbps") or bench.copy_gbps(device, args.reps)
    md = ck.out / "kernels.md"
    md.write_text(f"```\n{bench.header(device, args.dtype, copy, args.moved)}\n{bench.COLUMNS}\n")
    triton_ok = triton_installed() and (device.type == "cuda" or interpreting())
    times = {}
    for d, V, k, n, name, t, nbytes in bench.measure(args, device, dtype, copy, triton_ok):
        with md.open("a") as f:
            f.write(bench.row(d, V, k, n, name, t, nbytes, copy) + "\n")
        gbps = nbytes / t / 1e9 if t else None
        append_csv(ck.out / "kernels.csv", KERNEL_COLS, {"d": d, "V": V, "I": k, "n": n, "method": name,
                   "time_us": t and round(t * 1e6, 2), "gbps": gbps and round(gbps, 2),
                   "pct_copy": gbps and round(100 * gbps / copy, 1)})
        times[(d, V, k, n, name)] = (t, gbps)
        if name.startswith("triton low-rank"):
            goal_row(ck, times, (d, V, k, n), copy)
        if ck.left() < 0:
            raise StepTimeout()
    with md.open("a") as f:
        f.write("```\n")
    return f"{len(times)} timings, Triton {'run' if triton_ok else 'not run (no GPU, no interpreter)'}"


def goal_row(ck: Check, times: dict, key: tuple, copy: float) -> None:
    """The kernels issue's goals at one point: Triton gathered GEMM % of copy, speedup over index_select."""
    tri, ref = times.get((*key, "triton gathered GEMM")), times.get((*key, "torch index_select+matmul"))
    if not tri or not tri[0] or not ref or not ref[0]:
        return
    d, V, k, n = key
    append_csv(ck.out / "kernels_goals.csv", GOAL_COLS, {"d": d, "V": V, "I": k, "n": n,
               "triton_pct_copy": f"{100 * tri[1] / copy:.3g}", "speedup_vs_index_select": f"{ref[0] / tri[0]:.3g}"})


# ---------------------------------------------------------------- lossless

def load_pipe(ck: Check, model_id: str, draft: str):
    """Pipeline on ck.device (bf16 on CUDA, fp32 on the CPU); a model without a frequency table gets one from
    the shipped prompts' token counts (FR-Spec needs one; only the tiny model lacks it)."""
    import torch
    from core.pipeline import Pipeline
    dtype = torch.bfloat16 if ck.device.startswith("cuda") else torch.float32
    runtime = "eager" if ck.tiny or model_id != ck.model_id else "auto"
    pipe = Pipeline.load(model_id, draft=draft, runtime=runtime, device=ck.device, dtype=dtype)
    if pipe.fr_rank is None:
        from core.decoding.freq import ranks_from_counts
        from core.train.freq import count_tokens
        counts = torch.zeros(pipe.vocab_size, dtype=torch.long)
        c = count_tokens(pipe.tokenizer, [p.text for p in ck.prompts()])[: pipe.vocab_size]
        counts[: len(c)] = c
        pipe.fr_rank = ranks_from_counts(counts)
    return pipe


def lossless_cfg(ck: Check, method: str, shape: str, vocab: int):
    from core.config import SpecConfig
    small = dict(w_max=64, fr_size=128) if vocab < 1000 else {}  # the tiny model: restricted heads stay restricted
    return SpecConfig(method=method, shape=shape, max_new_tokens=ck.max_new, **small).validate()


def run_lossless(ck: Check, pipe, csv_name: str, prompts) -> dict:
    """Every method x {chain, tree} against AR greedy, prompt by prompt, until the prompts or the time run out."""
    from core.config import METHODS
    from core.trace.stats import compare_to_ar, summarize
    n = same = done = 0
    dtype = str(pipe.model.dtype).removeprefix("torch.")
    for p in prompts:
        t0 = time.perf_counter()
        ar = list(pipe.run(p.text, lossless_cfg(ck, "ar", "tree", pipe.vocab_size)))
        ck.facts["sec_per_token"] = (time.perf_counter() - t0) / ck.max_new
        for method in METHODS[1:]:
            for shape in ("chain", "tree"):
                t0 = time.perf_counter()
                recs = list(pipe.run(p.text, lossless_cfg(ck, method, shape, pipe.vocab_size)))
                cmp, s = compare_to_ar(recs, ar), summarize(recs)
                append_csv(ck.out / csv_name, LOSSLESS_COLS, {
                    "model": Path(pipe.model_id).name, "device": ck.device, "dtype": dtype, "draft": pipe.draft_name,
                    "prompt_id": p.id, "category": p.category, "method": method, "shape": shape,
                    "identical": cmp["identical"], "tie": cmp["tie"], "first_diff": cmp["first_diff"],
                    "new_tokens": s["new_tokens"], "tau": round(s["mean_accept_len"], 3),
                    "wall_s": round(time.perf_counter() - t0, 3)})
                n, same = n + 1, same + bool(cmp["identical"])
        done += 1
        if ck.left() < 12 * ck.facts["sec_per_token"] * ck.max_new:  # not enough left for another prompt's 11 runs
            break
    return {"runs": n, "identical": same, "prompts": done}


def step_lossless_tiny(ck: Check) -> str:
    from tools.device_tiny import save_tiny
    pipe = load_pipe(ck, str(save_tiny(ck.out / "tiny_model")), "self")
    res = run_lossless(ck, pipe, "lossless_tiny.csv", ck.prompts(2 if ck.tiny else 8))
    return f"{res['identical']}/{res['runs']} identical to AR over {res['prompts']} prompts"


def step_lossless(ck: Check) -> str:
    pipe = load_pipe(ck, ck.model_id, "self" if ck.tiny else "auto")
    res = run_lossless(ck, pipe, "lossless.csv", ck.prompts(2 if ck.tiny else None))
    return f"{res['identical']}/{res['runs']} identical to AR over {res['prompts']} prompts (draft {pipe.draft_name})"


# ---------------------------------------------------------------- weights

def step_weights(ck: Check) -> str:
    if ck.tiny:
        from tools.device_tiny import chunk_round_trip
        res = chunk_round_trip(ck.tiny_dir, ck.out / "weights_chunks")
        write_json(ck, "weights.json", res)
        if not res["weights_equal"]:
            raise SpecError("the reassembled tiny model differs from the original")
        return f"{res['parts']} parts, reassembled weights equal"
    from core.models import DEFAULT_MODEL, cached_checkpoint, converted_dir
    from core.paths import cache_root
    t0, had = time.perf_counter(), (converted_dir(DEFAULT_MODEL) / "config.json").is_file()
    path = cached_checkpoint(DEFAULT_MODEL)
    res = {"model": DEFAULT_MODEL, "cache": str(cache_root()), "checkpoint": str(path), "already_converted": had,
           "seconds": round(time.perf_counter() - t0, 1)}
    write_json(ck, "weights.json", res)
    return f"{'cached' if had else 'converted'} in {res['seconds']} s"


# ---------------------------------------------------------------- paper grid

def paper_settings(ck: Check) -> dict:
    """The grid reduced to the time left: per-category prompts, sweeps and tokens shrink until the estimate fits."""
    base = {"figures": str(ck.out / "paper"), "model": ck.model_id, "limit": 1, "png": not ck.tiny,
            "draft": "self" if ck.tiny else "auto", "runtime": "eager" if ck.tiny else "auto"}
    if ck.tiny:
        return base | {"max_new_tokens": 6, "sweep_prompts": 1, "categories": ["conv"]}
    cats = list(dict.fromkeys(p.category for p in ck.prompts()))
    per_token = ck.facts.get("sec_per_token", 0.03)
    for tokens, sweep, n_cats in ((128, 1, len(cats)), (64, 1, len(cats)), (64, 0, len(cats)), (64, 0, 3), (32, 0, 2)):
        runs = 6 * n_cats + 17 * sweep
        if runs * per_token * tokens < 0.7 * ck.left():
            break
    return base | {"max_new_tokens": tokens, "sweep_prompts": sweep, "categories": cats[:n_cats]}


def step_paper(ck: Check) -> str:
    from core.paper import run_paper
    from core.args import torch_dtype
    from core.pipeline import _LOADED, load_key
    settings = paper_settings(ck)
    settings["dtype"] = "bf16" if ck.device.startswith("cuda") else "fp32"
    pipe = load_pipe(ck, settings["model"], settings["draft"])
    # run_paper loads through bench (device None): the same pipeline, with its FR table, under that key too
    _LOADED.setdefault(load_key(settings["model"], settings["draft"], settings["runtime"], None,
                                torch_dtype(settings["dtype"]), settings.get("draft_weights", "auto")), pipe)
    write_json(ck, "paper_settings.json", settings)
    paths = run_paper(settings, progress=lambda f, desc=None: None, draw=ck.draw)
    return f"{len(paths)} files, {settings['max_new_tokens']} tokens, sweeps {settings['sweep_prompts']}"


def step_train(ck: Check) -> str:
    from core.train.device import train_step
    return train_step(ck, load_pipe, write_json)


STEP_FNS = {"env": step_env, "kernels": step_kernels, "lossless_tiny": step_lossless_tiny, "weights": step_weights,
            "lossless": step_lossless, "train": step_train, "paper": step_paper}


# ---------------------------------------------------------------- summary + CLI

def summary_text(ck: Check) -> str:
    lines = [f"# device-check ({'tiny, ' if ck.tiny else ''}{ck.device}, {ck.minutes} min)", "",
             "| step | status | seconds | budget s | note |", "|---|---|---|---|---|"]
    for name, s in ck.status.items():
        lines.append(f"| {name} | {s['status']} | {s['seconds']} | {s['budget_s']} | {s['note']} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m tools.device_check", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=None, help="whole budget (default: 9; --tiny: 3)")
    p.add_argument("--tiny", action="store_true", help="a tiny random model on the CPU, Triton in the interpreter")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma list of {', '.join(STEPS)}")
    p.add_argument("--max-new-tokens", type=int, default=None, help="lossless tokens per prompt (default 64; tiny 8)")
    p.add_argument("--data", default=None, help="prompts to self-distill (JSONL[.gz] with prompt fields; default "
                   "runs/chunks/distill_prompts.jsonl.gz if present, else the shipped prompts)")
    p.add_argument("--work", default=None, help="scratch dir for the feature cache and checkpoints (default: "
                   "runs/device_work; --tiny: DIR/work)")
    p.add_argument("--train-minutes", type=float, default=5.0, help="at most this much for the train step")
    p.add_argument("--device", default=None, help="default: cuda if present (--tiny: cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's; --tiny: 1)")
    return p.parse_args(argv)


def check_from(args) -> tuple:
    import torch
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        raise SpecError(f"unknown step(s) {', '.join(bad) or '(none)'}; choose from {', '.join(STEPS)}")
    device = args.device or ("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError("--device cuda: no CUDA device here")
    if args.minutes is not None and args.minutes <= 0:
        raise SpecError("--minutes must be positive")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ck = Check(out=out, tiny=args.tiny, device=device, minutes=args.minutes or (3.0 if args.tiny else 9.0),
               max_new=args.max_new_tokens or (8 if args.tiny else 64), data=args.data,
               train_minutes=args.train_minutes,
               work=Path(args.work or (out / "work" if args.tiny else "runs/device_work")))
    return ck, [s for s in STEPS if s in steps]


def main(argv=None, draw=None) -> int:
    args = parse(argv)
    if args.tiny:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (transformers may)
    ck, steps = check_from(args)
    ck.draw = draw
    if args.threads or args.tiny:
        import torch
        torch.set_num_threads(args.threads or 1)  # tiny models are per-op overhead; 1 thread is steadiest
    status = run_steps(ck, steps)
    print((ck.out / "summary.md").read_text())
    return 0 if all(s["status"] == "ok" for s in status.values()) else 1


def cli(argv=None) -> int:
    """python -m tools.device_check: main with the paper figures drawn (viz.paper, where plotly is installed) and a
    SpecError as one `error:` line and exit status 2, as the product's door (core/cli.py) does."""
    from core.cli import drawing
    try:
        return main(argv, draw=drawing())
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(cli())
