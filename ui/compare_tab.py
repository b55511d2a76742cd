"""Compare tab: the same prompt under several methods, one after another. Outputs: table, plot, texts."""
import gradio as gr

import core.engine_thread as engine_thread
from core.cost.choose import resolve_shape
from core.config import METHODS, SpecConfig
from core.errors import SpecError
from core.trace.live import baseline_of, run_to_end
from ui.models import GPU, load_pipeline
from ui.runs import (RUN_MAX_SECONDS, baseline_key, cached_ar, check_prompt, comparison, cost_now, make_config, remember_ar,
                     shown_error, stoppable)
from viz import plots
from viz.notes import compare_texts, status_note
from viz.summary import compare_table, speedup


@GPU
def compare_ui(prompt, methods, model_key, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
               temperature, shape="auto", request: gr.Request = None):
    """Yields after each method: the table, the coverage plot and the texts so far."""
    with stoppable(request) as should_stop:
        try:
            prompt = check_prompt(prompt)
            if not methods:
                raise SpecError("pick at least one method to compare")
            pipe = load_pipeline(model_key)
            yield from _compare_runs(pipe, prompt, list(methods), model_key, should_stop,
                                     (w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new, temperature, shape))
        except Exception as e:  # keep serving: one line on screen, the traceback in the server log
            yield {"table": shown_error(e)}


def _compare_runs(pipe, prompt, methods, model_key, should_stop, settings):
    ordered = sorted(methods, key=lambda m: METHODS.index(m) if m in METHODS else 99)
    runs, errors = {}, {}
    for i, method in enumerate(ordered):
        if should_stop():
            break
        yield {"table": status_note(f"running {method} ({i + 1}/{len(ordered)})…")}
        try:  # one method failing (e.g. no FR-Spec table) does not stop the others
            cfg = make_config(method, *settings, vocab_size=getattr(pipe, "vocab_size", None), model_id=getattr(pipe, "model_id", None))
            cfg, note = resolve_shape(pipe, cfg, allow_context=False, allow_plain=False)  # each head at its own best shape
            runs[method] = engine_thread.call(run_to_end, pipe, prompt, cfg, should_stop, RUN_MAX_SECONDS)
            runs[method]["meta"]["cost"] = cost_now(pipe, cfg, note, len(pipe.prompt_ids(prompt)))
        except SpecError as e:
            errors[method] = str(e)
            continue
        if method == "ar":
            remember_ar(baseline_key(model_key, prompt, cfg), baseline_of(runs[method]))
        yield compare_view(runs, errors, model_key, prompt)
    if errors:
        yield compare_view(runs, errors, model_key, prompt)


def compare_view(runs: dict, errors: dict, model_key: str, prompt: str) -> dict:
    """{method: trace} and {method: error} -> the table (speedup and verdict against the cached AR run), plot, texts."""
    rows = []
    for method, trace in runs.items():
        cfg = SpecConfig.from_dict(trace["meta"]["cfg"])
        trace["meta"]["baseline"] = cached_ar(baseline_key(model_key, prompt, cfg))
        ar, verdict = comparison(trace)
        rows.append({"method": method, "summary": trace["meta"]["summary"], "records": trace["records"],
                     "speedup": speedup(trace["meta"]["summary"], ar), "lossless": verdict,
                     "predicted": (trace["meta"].get("cost") or {}).get("run")})
    rows += [{"method": m, "error": msg} for m, msg in errors.items()]
    fig = plots.compare_coverage_fig({m: t["records"] for m, t in runs.items()})
    return {"table": compare_table(rows), "plot": fig, "texts": compare_texts(runs)}
