"""SpecLens web app: watch speculative decoding step by step (python app.py; Hugging Face Spaces entry point).

The layout: components, tabs and the wiring of their events to the handlers in ui/ (each handler returns
{component name: value}; `by_name` hands gradio those values in the order of the event's outputs)."""
import argparse
import contextlib
import functools
import inspect
import os
import sys

import gradio as gr

from core.config import METHODS, SpecConfig
from core.examples import APP_MAX_NEW_TOKENS
from core.prompts import CATEGORIES
from core.prompts import example_prompts as shipped_prompts
from ui.api import generate
from ui.compare_tab import compare_ui
from ui.maps_tab import maps_tab
from ui.models import PAIR_KEY, hub_reachable, model_choices, pair_offer, preload_default_model
from ui.paper_tab import paper_ui
from ui.run_tab import initial_trace, play, replay, replay_shift, run_ui, show_example, speed_to_interval, tick
from ui.runs import (DRAFT_SHAPES, SLIDERS, UI_MAX_NEW_TOKENS, pay_for, request_stop, settings_for, summary_for,
                     write_downloads)
from viz.learn import learn_figure, learn_markdown
from viz.notes import source_note, status_note
from viz.panels import PANELS, render_panels
from viz.style import CSS
from viz.tokens import last_index

TEXT_VIEWS = ("the text", "with drafts")  # only what the target emitted | rejected drafts inline, struck
# the text view is a page class (CSS hides rejected drafts): no server round trip; phones start on "the text"
VIEW_JS = "(v) => { document.body.classList.toggle('speclens-text-view', v === 'the text'); return v; }"
PHONE_VIEW_JS = ("() => { const v = window.innerWidth <= 640 ? 'the text' : 'with drafts'; "
                 "document.body.classList.toggle('speclens-text-view', v === 'the text'); return v; }")
RUN_OUT = ("trace", "step", "note", "text", "stream", "tree", "coverage", "active", "accept", "timing", "summary",
           "pay", "files")  # the Run tab's outputs, in order
SETTINGS = ("w_max", "k_pre", "k_ver", "fr_size", "rank", "depth", "top_k", "tree_size", "max_new", "temperature",
            "shape")
MODEL_EVENTS = {"concurrency_id": "model", "concurrency_limit": 1, "api_visibility": "private"}
PRIVATE = {"api_visibility": "private"}


def by_name(fn, names):
    """fn returns (or yields) {component name: value}; the wrapper hands gradio the values in `names` order,
    gr.skip() for a name fn left out (that component keeps its value). Signature kept: gradio reads it."""
    def ordered(values: dict) -> list:
        unknown = set(values) - set(names)
        assert not unknown, f"{fn.__name__} returned outputs this event does not have: {unknown}"
        return [values.get(k, gr.skip()) for k in names]
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            with contextlib.closing(fn(*args, **kwargs)) as values_seq:  # closing the page closes fn's run
                for values in values_seq:
                    yield ordered(values)
        return stream

    @functools.wraps(fn)
    def once(*args, **kwargs):
        return ordered(fn(*args, **kwargs))
    return once


def example_prompts() -> list:
    """[(category, prompt)]: the first shipped prompt of each category."""
    return [(p.category, p.text) for p in shipped_prompts()]


def example_label(category: str, prompt: str, width: int = 48) -> str:
    flat = " ".join(prompt.split())
    return f"{category}: {flat[:width]}…" if len(flat) > width else f"{category}: {flat}"


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
            with gr.Tab("Maps", id="maps"):
                maps_tab(ui["model"])
            with gr.Tab("Learn", id="learn"):
                gr.HTML(learn_figure())
                gr.Markdown(learn_markdown())
        _wire(demo, ui, cmp, pap, trace_state)
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
                        example_labels=[example_label(c, p) for c, p in examples],
                        label="Examples (conv · mt · summ · qa · math · rag · code)")
            ui["model"] = gr.Dropdown(choices=model_choices(hub), value=model_choices(hub)[0][1],
                                      label="Model ← draft", elem_id="model-dd",
                                      info="Target model and its drafter (Hub pairs appear when the Hub is reachable).")
            ui["method"] = gr.Radio(choices=[(f"{m}", m) for m in METHODS], value="nanospec", label="Method",
                                    info="ar plain · full full-vocab head · frspec static top-K · nanospec "
                                         "dynamic I_t · slimspec low-rank head · nanoslim both", elem_id="method-radio")
            ui.update(_settings_accordion())
            with gr.Row():
                ui["run"] = gr.Button("Run", variant="primary", elem_id="run-btn")
                ui["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
        with gr.Column(scale=3, min_width=320, elem_id="run-view"):
            ui["note"] = gr.HTML(source_note(example), elem_id="source-note")
            ui["summary"] = gr.HTML(summary_for(example), elem_id="summary")
            ui["pay"] = gr.HTML(pay_for(example), elem_id="pay-panel")
            offer = pair_offer()
            ui["try_pair"] = gr.Button(offer or "the Qwen pair", visible=bool(offer), size="sm", elem_id="try-pair")
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
        s["shape"] = gr.Radio(choices=list(DRAFT_SHAPES), value="auto", label="Draft shape", elem_id="shape-radio",
                              info="auto: the tree, chain or no model draft that this machine's calibration predicts "
                                   "fastest (python -m core calibrate; the app measures it once in the background).")
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
    c["table"] = gr.HTML(status_note("Pick methods and press Compare."), elem_id="compare-table")
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


def _on(event, fn, inputs, comps: dict, names: tuple, **kw) -> None:
    """Listen to `event` with fn, whose named results go to comps[name] for each of `names`."""
    event(by_name(fn, names), inputs, [comps[k] for k in names], **kw)


def _wire(demo, ui, cmp, pap, trace_state) -> None:
    run = {"trace": trace_state, **ui}
    settings = [ui[k] for k in SETTINGS]
    _on(ui["run"].click, run_ui, [ui["prompt"], ui["model"], ui["method"]] + settings, run, RUN_OUT, **MODEL_EVENTS)
    _on(cmp["run"].click, compare_ui, [cmp["prompt"], cmp["methods"], ui["model"]] + settings, cmp,
        ("table", "plot", "texts"), **MODEL_EVENTS)
    # Stop = a per-session flag the engine polls between steps: the run ends at the next step boundary and
    # keeps its partial trace (summary shows "stopped"). Gradio's cancels= left outputs in an "Error" state
    # and, when it hit the first step, blocked the next Run click in gradio 6.31.
    for btn in (ui["stop"], cmp["stop"]):
        btn.click(request_stop, None, None, queue=False, **PRIVATE)
    _wire_replay(run)
    _on(ui["model"].change, show_example, [ui["model"], trace_state], run, RUN_OUT, **PRIVATE)
    _on(ui["model"].change, settings_for, [ui["model"]], ui, SLIDERS, **PRIVATE)  # the model's measured defaults
    ui["try_pair"].click(lambda: gr.Dropdown(value=PAIR_KEY), None, ui["model"], **PRIVATE)  # then model.change
    ui["view"].change(None, ui["view"], ui["view"], js=VIEW_JS)
    demo.load(None, None, ui["view"], js=PHONE_VIEW_JS)
    gr.api(generate, api_name="generate", concurrency_id="model", concurrency_limit=1)
    _on(pap["run"].click, paper_ui, [ui["model"], pap["upload"], pap["limit"], pap["max_new"], pap["categories"]],
        pap, ("note", "report", "files"), **MODEL_EVENTS)


def _wire_replay(run: dict) -> None:
    at = [run["trace"], run["step"]]
    _on(run["step"].input, replay, at, run, PANELS, trigger_mode="always_last", **PRIVATE)
    _on(run["back"].click, lambda t, s: replay_shift(t, s, -1), at, run, ("step",) + PANELS, **PRIVATE)
    _on(run["fwd"].click, lambda t, s: replay_shift(t, s, 1), at, run, ("step",) + PANELS, **PRIVATE)
    _on(run["play"].click, play, at, run, ("timer", "step"), **PRIVATE)
    run["pause"].click(lambda: gr.Timer(active=False), None, run["timer"], **PRIVATE)
    run["speed"].change(speed_to_interval, run["speed"], run["timer"], **PRIVATE)
    _on(run["timer"].tick, tick, at, run, ("timer", "step") + PANELS, **PRIVATE)


# ---------------------------------------------------------------- entry point

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
