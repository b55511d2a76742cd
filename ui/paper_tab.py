"""Paper figures tab: core.paper.run_paper (the same code as `python -m core bench --figures DIR`) with
gradio's progress bar. Outputs: note, report, files."""
import tempfile
import threading
from pathlib import Path

import gradio as gr

import core.engine_thread as engine_thread
from core.paper import run_paper
from ui.models import GPU, parse_model_key
from ui.runs import shown_error
from viz.notes import status_note
from viz.paper import draw_figures

_PAPER_LOCK = threading.Lock()


def paper_settings(model_key, upload, limit, max_new, categories, out_dir) -> dict:
    """run_paper's settings: the shipped prompts, or the JSONL file the user uploaded (a server-side temp
    copy made by gradio, never a path typed by the user)."""
    model_id, draft = parse_model_key(model_key)
    settings = {"figures": out_dir, "limit": int(limit), "max_new_tokens": int(max_new), "model": model_id,
                "draft": draft, "categories": list(categories or []) or None}
    if upload:
        settings["prompts"] = [upload if isinstance(upload, str) else upload.name]
    return settings


@GPU
def paper_ui(model_key, upload, limit, max_new, categories, progress=gr.Progress()):
    try:
        out_dir = tempfile.mkdtemp(prefix="speclens-paper-")
        settings = paper_settings(model_key, upload, limit, max_new, categories, out_dir)
        with _PAPER_LOCK:  # one grid at a time: it holds the model for minutes
            paths = engine_thread.call(run_paper, settings, progress=progress, draw=draw_figures)
        report = Path(paths["report.md"]).read_text()
        files = [p for name, p in sorted(paths.items()) if name.endswith((".md", ".csv", ".png", ".html"))]
        return {"note": status_note(f"Done: {len(files)} files in the downloads below."), "report": report,
                "files": files}
    except Exception as e:  # keep serving: one line on screen, the traceback in the server log
        return {"note": shown_error(e)}
