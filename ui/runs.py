"""What every tab's run shares: the settings and prompt checks, the per-session stop flag, one-line errors,
plain-decoding baselines (cached per process), the summary cards and the downloads."""
import dataclasses
import os
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path

import gradio as gr

import core.engine_thread as engine_thread
from core.config import SpecConfig
from core.errors import SpecError
from core.models import draft_defaults
from core.trace.file import save_trace
from core.trace.live import baseline_of, lossless_verdict, run_to_end
from viz import plots
from viz.notes import error_note, trace_notes
from viz.panels import all_figures
from viz.pay import pay_panel
from viz.summary import speedup, summary_cards

UI_MAX_NEW_TOKENS = 512
DRAFT_SHAPES = (("auto: the cost model's best on this machine", "auto"), ("the tree set below", "tree"),
                ("no model draft: prompt lookup alone", "context"))
SLIDERS = ("w_max", "k_pre", "k_ver", "fr_size", "rank", "depth", "top_k", "tree_size")  # default_settings order
RUN_MAX_SECONDS = float(os.environ.get("SPECLENS_MAX_SECONDS", "300"))  # wall-clock cap per run (cut, not lost)
AR_CACHE_SIZE = 64
_AR_CACHE = {}  # baseline_key -> AR baseline, shared by every session (see ar_baseline)
_STOP = {}  # session hash -> stop requested, only while that session has a run going


# ---------------------------------------------------------------- settings and prompt

def make_config(method, w_max, k_pre, k_ver, fr_size, rank, depth, top_k, tree_size, max_new, temperature,
                shape="tree", vocab_size=None, model_id=None) -> SpecConfig:
    """The sliders' settings; what the app has no control for (chain / γ, context drafting, SlimSpec's rescoring) is
    the model's measured choice. shape: one of DRAFT_SHAPES' values ("tree" = the sliders' tree)."""
    if int(max_new) > UI_MAX_NEW_TOKENS:
        raise SpecError(f"max new tokens must be at most {UI_MAX_NEW_TOKENS} in the web app, got {int(max_new)}")
    if shape not in dict(DRAFT_SHAPES).values():
        raise SpecError(f"draft shape must be one of {', '.join(v for _, v in DRAFT_SHAPES)}; got {shape!r}")
    fixed = {k: v for k, v in draft_defaults(model_id).items() if k not in SLIDERS}
    if shape != "tree":
        fixed |= {"shape": shape} | ({"context": "on"} if shape == "context" else {})
    cfg = SpecConfig(method=method, w_max=int(w_max), k_pre=int(k_pre), k_ver=int(k_ver), fr_size=int(fr_size),
                     rank=int(rank), depth=int(depth), top_k=int(top_k), tree_size=int(tree_size),
                     max_new_tokens=int(max_new), temperature=float(temperature), **fixed)
    return cfg.validate(vocab_size=vocab_size)


def default_settings(model_id=None) -> tuple:
    """make_config's settings between the method and max_new, as the sliders start for this model."""
    c = SpecConfig(**draft_defaults(model_id))
    return tuple(getattr(c, k) for k in SLIDERS)


def settings_for(model_key: str) -> dict:
    """{slider name: value}: the chosen model's measured draft defaults (e.g. the Qwen pair's K_pre = K_ver = 16)."""
    from ui.models import parse_model_key
    return dict(zip(SLIDERS, default_settings(parse_model_key(model_key)[0])))


def check_prompt(prompt: str) -> str:
    prompt = (prompt or "").strip()
    if not prompt:
        raise SpecError("the prompt is empty: type something or pick an example")
    if len(prompt) > 8000:
        raise SpecError(f"the prompt is too long for the web demo ({len(prompt)} characters, max 8000)")
    return prompt


# ---------------------------------------------------------------- stop flag and errors

def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


@contextmanager
def stoppable(request):
    """This session's stop flag while a run goes; yields should_stop() for the engine to poll between steps."""
    sess = _session(request)
    _STOP[sess] = False
    try:
        yield lambda: _STOP.get(sess, False)
    finally:
        _STOP.pop(sess, None)


def request_stop(request: gr.Request = None):
    sess = _session(request)
    if sess in _STOP:  # a stop between runs must not leave an entry behind
        _STOP[sess] = True


def error_message(e: Exception) -> str:
    """One line for the visitor; an unexpected exception's traceback goes to the server log."""
    if isinstance(e, SpecError):
        return str(e)
    traceback.print_exc()
    return f"internal error: {type(e).__name__}: {e}"


def shown_error(e: Exception) -> str:
    """A failed run on screen: a warning toast, and the error box returned for the status line."""
    msg = error_message(e)
    gr.Warning(msg)
    return error_note(msg)


# ---------------------------------------------------------------- plain-decoding baselines

def baseline_key(model_key, prompt, cfg: SpecConfig) -> str:
    return f"{model_key}\x00{prompt}\x00{cfg.max_new_tokens}\x00{cfg.temperature}\x00{cfg.seed}"


def remember_baseline(baselines: dict, key: str, baseline: dict, keep: int = 4) -> dict:
    """AR baselines (core.trace.live.baseline_of), newest last, at most `keep` of them."""
    out = {k: v for k, v in (baselines or {}).items() if k != key}
    out[key] = baseline
    return dict(list(out.items())[-keep:])


def remember_ar(key: str, baseline: dict) -> None:
    """Caches a whole (not cut) plain-decoding run for every later run of the same prompt and settings."""
    if not baseline["summary"].get("cut"):
        kept = remember_baseline(_AR_CACHE, key, baseline, keep=AR_CACHE_SIZE)
        _AR_CACHE.clear()
        _AR_CACHE.update(kept)


def cached_ar(key: str) -> dict | None:
    return _AR_CACHE.get(key)


def ar_baseline(pipe, prompt: str, cfg: SpecConfig, model_key: str, should_stop=lambda: False) -> dict:
    """Plain decoding of this prompt and settings, cached per process: it costs once per prompt+settings."""
    key = baseline_key(model_key, prompt, cfg)
    if key in _AR_CACHE:
        return _AR_CACHE[key]
    ar = baseline_of(engine_thread.call(run_to_end, pipe, prompt, dataclasses.replace(cfg, method="ar"), should_stop,
                                        RUN_MAX_SECONDS))
    remember_ar(key, ar)
    return ar


def cost_now(pipe, cfg: SpecConfig, note: str = "", prompt_tokens: int | None = None) -> dict:
    """core.cost.choose.report of a run's config read at this moment: a probe of the target's and the drafter's passes
    (on the engine thread, at most every PROBE_MAX_AGE_S per pipeline) rescales the cached calibration's curves."""
    from core.cost.choose import report
    from core.cost.probe import PROBE_MAX_AGE_S, anchor_probe
    probe = engine_thread.call(anchor_probe, pipe, PROBE_MAX_AGE_S)
    return report(pipe, cfg, note, prompt_tokens, probe)


def comparison(trace: dict) -> tuple:
    """(AR summary or None, compare_to_ar verdict or None) for a finished run and its meta["baseline"].
    No verdict when sampling or when either run was cut short (a partial run says nothing)."""
    ar = trace["meta"].get("baseline")
    if not ar or trace["meta"]["method"] == "ar":
        return None, None
    greedy = float(trace["meta"]["cfg"].get("temperature", 0)) == 0.0
    whole = not trace["meta"]["summary"].get("cut") and not ar["summary"].get("cut")
    return ar["summary"], (lossless_verdict(trace, ar) if greedy and whole else None)


# ---------------------------------------------------------------- what a finished run shows

def summary_for(trace: dict) -> str:
    s = trace.get("meta", {}).get("summary")
    if not s:
        return summary_cards({})
    ar, verdict = comparison(trace)
    return summary_cards(s, trace["meta"].get("method", ""), baseline=ar, lossless=verdict,
                         runtime=trace["meta"].get("runtime_note", ""), records=trace["records"],
                         notes=trace_notes(trace["meta"]))


def pay_for(trace: dict) -> str:
    """The "Will it pay here?" panel of a finished run: meta["cost"] (core.cost.choose.report) beside what it measured."""
    meta = trace.get("meta", {})
    ar, _ = comparison(trace)
    cost = meta.get("cost")
    return pay_panel(cost, meta.get("summary"), speedup(meta.get("summary") or {}, ar),
                     (cost or {}).get("calibrating"), measured_like_here(meta.get("model", "")))


def measured_like_here(model: str) -> list:
    """The results rows of this model measured on CPUs of this machine's class (none where the file is missing)."""
    from core.results import like_this_cpu
    try:
        return [r for r in like_this_cpu() if r.get("model") == model]
    except (OSError, ValueError):
        return []


def write_downloads(trace: dict) -> list:
    """The trace JSON and its plots as one HTML page, in a fresh temp folder: [trace path, plots path]."""
    d = Path(tempfile.mkdtemp(prefix="speclens-"))
    name = f"speclens-{trace['meta'].get('method', 'run')}"
    trace_path = save_trace(trace, d / f"{name}-trace.json")
    html_path = d / f"{name}-plots.html"
    html_path.write_text(plots.figures_html(all_figures(trace), title=f"SpecLens · {name}"))
    return [str(trace_path), str(html_path)]
