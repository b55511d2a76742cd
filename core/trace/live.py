"""A run recorded as a trace: to the end (`run_to_end`), or on the engine thread at the engine's own speed (`LiveRun`),
whose latest state readers sample; and a run's plain-decoding (AR) baseline with the lossless verdict on it."""
import threading
import time
from datetime import datetime, timezone
from typing import Protocol

import core.engine_thread as engine_thread
from core.config import SpecConfig
from core.errors import SpecError
from core.trace.file import add_vocab, missing_ids, new_trace
from core.trace.record import StepRecord
from core.trace.stats import compare_to_ar, summarize


class Recordable(Protocol):
    """What a recorded run needs of a pipeline (core.pipeline.Pipeline)."""
    model_id: str
    vocab_size: int

    def run(self, prompt: str, cfg: SpecConfig, chat: bool = True, should_stop=None, max_seconds=None):
        """Yields one StepRecord per engine step."""

    def decode_tokens(self, ids: list) -> list:
        """Display strings of token ids."""


def trace_meta(pipe: Recordable, prompt: str, cfg: SpecConfig) -> dict:
    return {"prompt": prompt, "model": pipe.model_id, "draft": getattr(pipe, "draft_name", ""),
            "runtime": getattr(pipe, "runtime_name", ""), "runtime_note": getattr(pipe, "runtime_note", ""),
            "method": cfg.method, "cfg": cfg.to_dict(), "slim_factors": slim_factors_kind(pipe, cfg),
            "vocab_size": getattr(pipe, "vocab_size", None), "created": datetime.now(timezone.utc).isoformat()}


def slim_factors_kind(pipe: Recordable, cfg: SpecConfig) -> str:
    """"trained" | "svd" (untrained: truncated SVD of the head) for SlimSpec/NanoSlim, "" otherwise."""
    if cfg.method not in ("slimspec", "nanoslim"):
        return ""
    trained = getattr(pipe, "slim_trained", None)
    return "trained" if cfg.slim_init == "trained" and trained and trained(cfg.rank) else "svd"


def record_trace(trace: dict, pipe: Recordable, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None):
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


def run_to_end(pipe: Recordable, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None) -> dict:
    return record_trace(new_trace(trace_meta(pipe, prompt, cfg)), pipe, prompt, cfg, should_stop, max_seconds)


class LiveRun:
    """One generation on the engine thread (core.engine_thread), at full speed; the UI samples `snapshot()`
    at its own frame rate."""

    def __init__(self, pipe: Recordable, prompt: str, cfg: SpecConfig, should_stop=lambda: False, max_seconds=None):
        self.trace = new_trace(trace_meta(pipe, prompt, cfg))
        self.error, self.done, self._cancel, self._job = None, threading.Event(), False, None
        stop = lambda: self._cancel or should_stop()  # noqa: E731
        self._args = (pipe, prompt, cfg, stop, max_seconds)

    def start(self) -> "LiveRun":
        self._job = engine_thread.submit(self._work, *self._args)
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
        """Stops the run at its next step (or before it starts, where it is still queued) and waits for it."""
        self._cancel = True
        if self._job is not None and self._job.cancel():
            self.error = SpecError("the run was stopped before it started")
            self.done.set()
        self.done.wait()

    def result(self) -> dict:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.trace


# ---------------------------------------------------------------- AR baselines and the verdict

def baseline_of(ar_trace: dict) -> dict:
    """What a trace keeps of its plain-decoding run: summary, tokens and target margins (enough for
    core.trace.stats.compare_to_ar), not its records."""
    recs = [StepRecord.from_dict(r) for r in ar_trace["records"]]
    return {"summary": ar_trace["meta"]["summary"], "tokens": [t for r in recs for t in r.emitted],
            "margin": [m for r in recs for m in r.margin]}


def baseline_records(baseline: dict) -> list:
    return [StepRecord(step=0, kind="ar", emitted=list(baseline["tokens"]), margin=list(baseline["margin"]))]


def lossless_verdict(trace: dict, baseline: dict) -> dict:
    """The CLI's verdict (core.trace.stats.compare_to_ar) on a run and its plain-decoding baseline."""
    return compare_to_ar([StepRecord.from_dict(r) for r in trace["records"]], baseline_records(baseline))
