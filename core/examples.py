"""The shipped example traces (python -m core example): the app's default prompt and settings rerun for every
offline model pair, with its plain-decoding (AR) baseline, and where and when it was measured."""
import argparse
import dataclasses
import hashlib
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from core.config import SpecConfig
from core.models import DEFAULT_MODEL, draft_defaults
from core.paths import ASSETS
from core.trace.file import round_floats, save_trace
from core.trace.live import LiveRun, baseline_of, lossless_verdict

APP_MAX_NEW_TOKENS = 64  # the app's default generation length (its slider starts here)
EXAMPLES = {  # offline model pair (model, draft) -> shipped example trace
    (DEFAULT_MODEL, "auto"): ASSETS / "example_trace.json",
    (DEFAULT_MODEL, "self"): ASSETS / "example_trace_self.json",
    ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"): ASSETS / "example_trace_qwen.json",
}


def app_config(method: str = "nanospec", vocab_size=None, model_id=None) -> SpecConfig:
    """The config the app runs with its settings untouched (the model's measured draft defaults, if any)."""
    return SpecConfig(method=method, max_new_tokens=APP_MAX_NEW_TOKENS,
                      **draft_defaults(model_id)).validate(vocab_size=vocab_size)


def default_prompt() -> str:
    from core.prompts import example_prompts
    return example_prompts()[0].text


# ---------------------------------------------------------------- shipped examples

def head_file(model_id: str, draft: str) -> Path | None:
    """The draft head file the app's pair `draft` loads (None: the target drafts for itself)."""
    from core.pipeline import head_dir
    eagle = head_dir(model_id) / "eagle.safetensors"
    return eagle if draft in ("auto", "eagle") and eagle.exists() else None


def sha256_of(path: Path | None) -> str:
    if path is None:
        return ""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def where_measured(wall_s: float, load_before) -> dict:
    import torch

    from core.cost.store import machine
    return {"host": platform.node(), "cpu": machine()["cpu"], "threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "wall_s": round(wall_s, 2),
            "load_avg_before": [round(x, 2) for x in load_before],
            "note": f"{os.cpu_count()}-core machine shared with other jobs; load average "
                    f"{load_before[0]:.2f} when the run started"}


def run_like_app(pipe, prompt: str, cfg: SpecConfig) -> dict:
    """One run in a worker thread, as the app's Run tab does it. (Measured 2026-11-30 on the shared 2-core
    machine at load ~14, AR, 32 tokens, 2 torch threads: 2.0 tok/s driven from the main thread, 32 tok/s from a
    worker thread; 22-23 tok/s with 1 thread from either.)"""
    return LiveRun(pipe, prompt, cfg).start().result()


def make_example(model_id: str, draft: str, prompt: str | None = None, method: str = "nanospec") -> dict:
    """One shipped example: the app's default run of `prompt` and its AR baseline, with provenance."""
    from core.pipeline import Pipeline
    pipe = Pipeline.load(model_id=model_id, draft=draft)
    prompt, cfg = prompt or default_prompt(), app_config(method, pipe.vocab_size, model_id)
    load, t0 = os.getloadavg(), time.perf_counter()
    run_like_app(pipe, prompt, cfg)  # warm-up: caches, kernels, allocator
    trace = run_like_app(pipe, prompt, cfg)
    ar = run_like_app(pipe, prompt, dataclasses.replace(cfg, method="ar"))
    trace["meta"].update(example=True, pair=draft, baseline=baseline_of(ar), dtype=str(pipe.model.dtype)[6:],
                         head_file=str(head_file(model_id, draft) or ""),
                         head_sha256=sha256_of(head_file(model_id, draft)),
                         measured=where_measured(time.perf_counter() - t0, load))
    return round_floats(trace)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core example",
                                description="regenerate the shipped example traces from the current defaults")
    p.add_argument("--prompt", default=None, help="default: the app's default prompt")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--model", default=None, help="only the examples of this target (default: every shipped one)")
    args = p.parse_args(argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    for (model_id, draft), path in EXAMPLES.items():
        if args.model and model_id != args.model:
            continue
        trace = make_example(model_id, draft, args.prompt)
        save_trace(trace, path)
        s, b = trace["meta"]["summary"], trace["meta"]["baseline"]["summary"]
        v = lossless_verdict(trace, trace["meta"]["baseline"])
        print(f"{path.name}: {trace['meta']['draft']} {s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, "
              f"AR {b['tokens_per_s']:.1f} tok/s, tau {s['mean_accept_len']:.2f}, identical {v['identical']}")
    return 0
