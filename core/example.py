"""Traces as the app records them, and the shipped example traces (python -m core example).

A live run records in a worker thread at the engine's own speed (LiveRun); readers sample its latest
state. `python -m core example` reruns the app's default prompt and settings for every offline model pair,
with its plain-decoding (AR) baseline, and records where and when it was measured."""
import argparse
import dataclasses
import hashlib
import os
import platform
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from core.config import SpecConfig
from core.errors import SpecError
from core.models import DEFAULT_MODEL, draft_defaults
from core.stats import compare_to_ar, summarize
from core.trace import StepRecord
from viz.tracefile import add_vocab, missing_ids, new_trace, round_floats, save_trace

ASSETS = Path(__file__).resolve().parent.parent / "assets"
APP_MAX_NEW_TOKENS = 64  # the app's default generation length (its slider starts here)
EXAMPLES = {  # offline model pair (model, draft) -> shipped example trace
    (DEFAULT_MODEL, "auto"): ASSETS / "example_trace.json",
    (DEFAULT_MODEL, "self"): ASSETS / "example_trace_self.json",
    ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"): ASSETS / "example_trace_qwen.json",
}


# ---------------------------------------------------------------- recording

def app_config(method: str = "nanospec", vocab_size=None, model_id=None) -> SpecConfig:
    """The config the app runs with its settings untouched (the model's measured draft defaults, if any)."""
    return SpecConfig(method=method, max_new_tokens=APP_MAX_NEW_TOKENS,
                      **draft_defaults(model_id)).validate(vocab_size=vocab_size)


def default_prompt() -> str:
    from core.prompts import example_prompts
    return example_prompts()[0].text


def trace_meta(pipe, prompt: str, cfg: SpecConfig) -> dict:
    return {"prompt": prompt, "model": pipe.model_id, "draft": getattr(pipe, "draft_name", ""),
            "runtime": getattr(pipe, "runtime_name", ""), "runtime_note": getattr(pipe, "runtime_note", ""),
            "method": cfg.method, "cfg": cfg.to_dict(), "slim_factors": slim_factors_kind(pipe, cfg),
            "vocab_size": getattr(pipe, "vocab_size", None), "created": datetime.now(timezone.utc).isoformat()}


def slim_factors_kind(pipe, cfg: SpecConfig) -> str:
    """"trained" | "svd" (untrained: truncated SVD of the head) for SlimSpec/NanoSlim, "" otherwise."""
    if cfg.method not in ("slimspec", "nanoslim"):
        return ""
    trained = getattr(pipe, "slim_trained", None)
    return "trained" if cfg.slim_init == "trained" and trained and trained(cfg.rank) else "svd"


def record_trace(trace: dict, pipe, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None):
    """Runs the pipeline, appending record dicts to trace["records"] (with display strings for every id
    they show). meta["gen_s"] counts only time inside the engine's generator, as `python -m core generate`."""
    steps = pipe.run(prompt, cfg, chat=True, should_stop=should_stop, max_seconds=max_seconds)
    gen_s = 0.0
    try:
        while True:
            t0 = time.perf_counter()
            rec = next(steps, None)  # the engine marks cut / finished on a record before yielding it
            gen_s += time.perf_counter() - t0
            if rec is None:
                break
            d = rec.to_dict()
            ids = missing_ids(trace, d)
            if ids:
                add_vocab(trace, ids, pipe.decode_tokens(ids))
            trace["records"].append(d)
            trace["meta"]["gen_s"] = gen_s
            trace["meta"].setdefault("first_s", gen_s)  # engine time up to the first record (prefill)
    finally:
        steps.close()  # a cancelled run releases the pipeline at once
    if not trace["records"]:
        raise SpecError("the engine produced no steps")
    return finish_trace(trace)


def finish_trace(trace: dict) -> dict:
    recs = [StepRecord.from_dict(r) for r in trace["records"]]
    trace["meta"]["summary"] = summarize(recs, wall_s=trace["meta"].get("gen_s"))
    return trace


def run_to_end(pipe, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None) -> dict:
    return record_trace(new_trace(trace_meta(pipe, prompt, cfg)), pipe, prompt, cfg, should_stop, max_seconds)


class LiveRun:
    """One generation in a worker thread, at full speed; the UI samples `snapshot()` at its own frame rate."""

    def __init__(self, pipe, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None):
        self.trace = new_trace(trace_meta(pipe, prompt, cfg))
        self.error, self.done, self._cancel = None, threading.Event(), False
        stop = lambda: self._cancel or should_stop()  # noqa: E731
        self._thread = threading.Thread(target=self._work, args=(pipe, prompt, cfg, stop, max_seconds),
                                        daemon=True, name="speclens-run")

    def start(self) -> "LiveRun":
        self._thread.start()
        return self

    def _work(self, pipe, prompt, cfg, stop, max_seconds):
        try:
            record_trace(self.trace, pipe, prompt, cfg, stop, max_seconds)
        except Exception as e:  # handed to the reader, who reports it
            self.error = e
        finally:
            self.done.set()

    def snapshot(self) -> dict:
        """The records so far (a copy of the list: the worker keeps appending)."""
        return {"meta": self.trace["meta"], "records": list(self.trace["records"])}

    def cancel(self) -> None:
        self._cancel = True
        self._thread.join()

    def result(self) -> dict:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.trace


# ---------------------------------------------------------------- AR baselines and the verdict

def baseline_of(ar_trace: dict) -> dict:
    """What a trace keeps of its plain-decoding run: summary, tokens and target margins (enough for
    core.stats.compare_to_ar), not its records."""
    recs = [StepRecord.from_dict(r) for r in ar_trace["records"]]
    return {"summary": ar_trace["meta"]["summary"], "tokens": [t for r in recs for t in r.emitted],
            "margin": [m for r in recs for m in r.margin]}


def baseline_records(baseline: dict) -> list:
    return [StepRecord(step=0, kind="ar", emitted=list(baseline["tokens"]), margin=list(baseline["margin"]))]


def lossless_verdict(trace: dict, baseline: dict) -> dict:
    """The CLI's verdict (core.stats.compare_to_ar) on a run and its plain-decoding baseline."""
    return compare_to_ar([StepRecord.from_dict(r) for r in trace["records"]], baseline_records(baseline))


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
    return {"host": platform.node(), "cpu": _cpu_name(), "threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "wall_s": round(wall_s, 2),
            "load_avg_before": [round(x, 2) for x in load_before],
            "note": f"{os.cpu_count()}-core machine shared with other jobs; load average "
                    f"{load_before[0]:.2f} when the run started"}


def _cpu_name() -> str:
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


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
