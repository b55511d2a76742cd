"""The one named API endpoint, /generate: a prompt with default settings -> the run summary."""
import gradio as gr

import core.engine_thread as engine_thread
from core.cost.choose import resolve_shape
from core.cost.predict import shape_label
from core.trace.live import run_to_end
from ui.models import DEFAULT_KEY, GPU, load_pipeline
from ui.runs import RUN_MAX_SECONDS, check_prompt, default_settings, error_message, make_config


@GPU
def generate(prompt: str, method: str = "nanospec", max_new_tokens: int = 64) -> dict:
    """Runs one prompt with default settings (the draft shape on auto); returns the run summary (the CLI's JSON keys) plus model/method."""
    try:
        n = int(max_new_tokens)
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"max_new_tokens must be an integer, got {max_new_tokens!r}") from None
    try:
        prompt = check_prompt(prompt)
        pipe = load_pipeline(DEFAULT_KEY)
        cfg = make_config(method, *default_settings(getattr(pipe, "model_id", None)), n, 0.0, "auto",
                          vocab_size=getattr(pipe, "vocab_size", None), model_id=getattr(pipe, "model_id", None))
        cfg, shape_note = resolve_shape(pipe, cfg)
        trace = engine_thread.call(run_to_end, pipe, prompt, cfg, max_seconds=RUN_MAX_SECONDS)
    except Exception as e:  # the traceback goes to the server log, the user gets one line
        raise gr.Error(error_message(e)) from None
    out = dict(trace["meta"]["summary"])
    out.update({"method": method, "model": trace["meta"]["model"], "draft": trace["meta"]["draft"],
                "shape": shape_label(cfg), "shape_note": shape_note})
    return out
