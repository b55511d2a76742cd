"""Run tab: one generation streamed into the panels, the replay slider and player, each model pair's example.

Outputs are named as app.py's Run-tab components: trace, step, note, text, stream, tree, coverage, active,
accept, timing, summary, pay, files (and timer for the player)."""
import os
import time

import gradio as gr

from core.cost.choose import resolve_shape
from core.examples import EXAMPLES
from core.trace.live import LiveRun, baseline_of, finish_trace
from core.trace.stats import summarize
from core.trace.record import StepRecord
from ui import cost_measure
from ui.models import GPU, load_pipeline, parse_model_key
from ui.runs import (RUN_MAX_SECONDS, ar_baseline, baseline_key, cached_ar, check_prompt, cost_now, make_config, pay_for,
                     remember_ar, shown_error, stoppable, summary_for, write_downloads)
from viz.notes import running_note, source_note, status_note, trace_notes
from viz.panels import render_panels
from viz.summary import summary_cards
from viz.synthetic import synthetic_trace
from viz.tokens import last_index
from core.trace.file import load_example, load_trace

FRAME_S = 1.0 / float(os.environ.get("SPECLENS_FPS", "5"))  # live run: panels sampled at this rate
LAST_RUN_STATS = {}  # last Run-tab run in this process: engine seconds vs panel-rendering seconds
PLAY_INTERVAL_S = {"0.5×": 1.6, "1×": 0.8, "2×": 0.4, "4×": 0.2}


# ---------------------------------------------------------------- a run, streamed

@GPU
def run_ui(prompt, model_key, method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
           temperature, shape="auto", request: gr.Request = None):
    """The engine runs in a worker at full speed; the panels sample it FRAME_S apart."""
    t_start = time.perf_counter()
    with stoppable(request) as should_stop:
        try:
            prompt = check_prompt(prompt)
            yield {"note": status_note("Starting (the first run also loads the model)…")}
            pipe = load_pipeline(model_key)
            cfg = make_config(method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
                              temperature, shape, vocab_size=getattr(pipe, "vocab_size", None),
                              model_id=getattr(pipe, "model_id", None))
            cfg, shape_note = resolve_shape(pipe, cfg)
            yield from _stream_run(pipe, prompt, cfg, model_key, should_stop, t_start, shape_note)
        except Exception as e:  # keep serving: one line on screen, the traceback in the server log
            yield {"note": shown_error(e)}


def cost_report(pipe, cfg, model_key: str, shape_note: str, prompt_tokens: int | None = None) -> dict:
    """meta["cost"] of a run: this machine's costs and verdicts; where none are measured yet, the background
    calibration starts (after the run: it would share the CPU with it) and its state is kept with the report."""
    out = cost_now(pipe, cfg, shape_note, prompt_tokens)
    if out.get("missing"):
        cost_measure.start(model_key, pipe)
        out["calibrating"] = cost_measure.status(model_key)
    return out


def _stream_run(pipe, prompt, cfg, model_key, should_stop, t_start, shape_note=""):
    live, render_s = LiveRun(pipe, prompt, cfg, should_stop, RUN_MAX_SECONDS).start(), 0.0
    try:
        while not live.done.wait(FRAME_S):
            t0 = time.perf_counter()
            frame = live_frame(live.snapshot(), cfg.method)
            render_s += time.perf_counter() - t0
            yield frame
    finally:
        live.cancel()  # a closed page stops the engine at its next step
    trace = live.result()
    t0 = time.perf_counter()
    prompt_tokens = len(pipe.prompt_ids(prompt))
    trace["meta"]["cost"] = cost_now(pipe, cfg, shape_note, prompt_tokens)
    key = baseline_key(model_key, prompt, cfg)
    if cfg.method == "ar":
        remember_ar(key, baseline_of(trace))
    cached = cached_ar(key)
    trace["meta"]["baseline"] = baseline_of(trace) if cfg.method == "ar" else cached
    needs_ar = cached is None and cfg.method != "ar" and not trace["meta"]["summary"].get("cut")
    yield finished_view(trace, status_note("Plain decoding of the same prompt for the speedup and lossless check…")
                        if needs_ar else source_note(trace, live=True))
    render_s += time.perf_counter() - t0
    LAST_RUN_STATS.update(gen_s=trace["meta"]["gen_s"], first_gen_s=trace["meta"].get("first_s", 0.0),
                          render_s=render_s, steps=len(trace["records"]), method=cfg.method,
                          tokens_per_s=trace["meta"]["summary"]["tokens_per_s"],
                          handler_s=time.perf_counter() - t_start)
    if needs_ar:
        trace["meta"]["baseline"] = ar_baseline(pipe, prompt, cfg, model_key, should_stop)
    trace["meta"]["cost"] = cost_report(pipe, cfg, model_key, shape_note, prompt_tokens)
    yield {"trace": trace, "note": source_note(trace, live=True), "summary": summary_for(trace), "pay": pay_for(trace),
           "files": write_downloads(trace)}


def live_summary(trace: dict) -> dict:
    """The run summary so far (while streaming): the engine's own tokens/s (its gen_s, not wall time)."""
    return summarize([StepRecord.from_dict(r) for r in trace["records"]], wall_s=trace["meta"].get("gen_s"))


def live_frame(snap: dict, method: str) -> dict:
    """One sampled frame of a running generation: text, stream, tree, note and the engine's own numbers."""
    if not snap["records"]:
        return {"note": status_note("Prefill…")}
    return {"note": running_note(snap), "summary": summary_cards(live_summary(snap), method, records=snap["records"],
                                                                 notes=trace_notes(snap["meta"])),
            **render_panels(snap, None, with_plots=False)}


def finished_view(trace: dict, note: str) -> dict:
    """Every Run-tab output for a whole trace: panels and replay slider at its end, summary, downloads."""
    n = last_index(trace)
    return {"trace": trace, "step": gr.Slider(maximum=max(n, 1), value=n), "note": note,
            "summary": summary_for(trace), "pay": pay_for(trace), "files": write_downloads(trace),
            **render_panels(trace, None)}


# ---------------------------------------------------------------- examples

def initial_trace() -> dict:
    """What the page shows before any run: the shipped example, else a synthetic trace."""
    trace = load_example()
    if trace is None:
        trace = synthetic_trace(n_steps=16)
    if not trace["meta"].get("summary"):
        finish_trace(trace)
    return trace


def example_for(model_key: str) -> dict | None:
    """The shipped example trace of a model pair (python -m core example), or None."""
    path = EXAMPLES.get(parse_model_key(model_key))
    try:
        trace = load_trace(path) if path else None
    except (OSError, ValueError):
        return None
    if trace is not None and not trace["meta"].get("summary"):
        finish_trace(trace)
    return trace


def show_example(model_key: str, trace: dict) -> dict:
    """Model pair changed: show its shipped example, unless the panels show the visitor's own run."""
    new = example_for(model_key) if (trace or {}).get("meta", {}).get("example") else None
    return {} if new is None else finished_view(new, source_note(new))


# ---------------------------------------------------------------- replay

def replay(trace: dict, step) -> dict:
    return render_panels(trace, max(0, min(int(step or 0), last_index(trace))))


def replay_shift(trace: dict, step, delta: int) -> dict:
    step = max(0, min(int(step or 0) + delta, last_index(trace)))
    return {"step": gr.Slider(value=step), **render_panels(trace, step)}


def tick(trace: dict, step) -> dict:
    """Timer tick while playing: advance one step; stop the timer at the end."""
    nxt = int(step or 0) + 1
    if nxt > last_index(trace):
        return {"timer": gr.Timer(active=False)}
    return {"timer": gr.Timer(active=True), "step": gr.Slider(value=nxt), **render_panels(trace, nxt)}


def play(trace: dict, step) -> dict:
    restart = int(step or 0) >= last_index(trace)
    return {"timer": gr.Timer(active=True), **({"step": gr.Slider(value=0)} if restart else {})}


def speed_to_interval(speed: str) -> gr.Timer:
    return gr.Timer(value=PLAY_INTERVAL_S.get(speed, 0.8))
