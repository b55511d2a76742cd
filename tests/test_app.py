"""The web app: the named `generate` endpoint driven through gradio_client against a launched app, and the
handlers in ui/ called directly (their outputs by component name), with input errors."""
import os
from pathlib import Path

from types import SimpleNamespace

import pytest

import app
from conftest import served_app
from core.config import SpecConfig
from core.errors import SpecError
from core.models import DEFAULT_MODEL
from ui import compare_tab, models, paper_tab, run_tab, runs
from ui.runs import default_settings, make_config
from viz.panels import PANELS
from viz.tokens import emitted_ids

KEY = f"{DEFAULT_MODEL}|auto"

SUMMARY_KEYS = {"text", "new_tokens", "steps", "draft_calls", "mean_accept_len", "mean_active_vocab", "coverage",
                "timing_ms", "tokens_per_s", "cut"}


@pytest.fixture(scope="module")
def served():
    from gradio_client import Client
    with served_app() as url:
        yield Client(url, verbose=False)


@pytest.mark.model
def test_generate_endpoint_returns_summary(served):
    out = served.predict("What is 2 + 3?", "nanospec", 12, api_name="/generate")
    assert SUMMARY_KEYS <= set(out), SUMMARY_KEYS - set(out)
    assert out["new_tokens"] >= 1 and out["steps"] >= 1 and isinstance(out["text"], str)
    assert out["method"] == "nanospec" and out["tokens_per_s"] > 0


@pytest.mark.model
def test_generate_bad_input_is_a_message_and_app_keeps_serving(served):
    from gradio_client.exceptions import AppError
    with pytest.raises(AppError, match="prompt is empty"):
        served.predict("   ", "nanospec", 8, api_name="/generate")
    with pytest.raises(AppError, match="method must be one of"):
        served.predict("hi", "bogus", 8, api_name="/generate")
    with pytest.raises(AppError, match="max new tokens"):
        served.predict("hi", "nanospec", 10**6, api_name="/generate")
    out = served.predict("Say hi.", "ar", 6, api_name="/generate")
    assert out["new_tokens"] >= 1


def test_api_lists_only_generate(served):
    info = served.view_api(print_info=False, return_format="dict")
    assert "/generate" in info["named_endpoints"]
    assert set(info["named_endpoints"]) == {"/generate"}


def run(prompt, method="nanospec", n=16, key=KEY) -> list:
    """Every Run-tab update of one run, each {component name: value} naming only Run-tab outputs."""
    outs = list(run_tab.run_ui(prompt, key, method, *default_settings(), n, 0.0))
    assert all(set(o) <= set(app.RUN_OUT) for o in outs), [set(o) - set(app.RUN_OUT) for o in outs]
    return outs


def test_run_ui_reports_errors_without_raising():
    outs = run("")
    assert len(outs) == 1 and "prompt is empty" in outs[0]["note"] and "error-box" in outs[0]["note"]
    outs = run("hi", key="/etc/passwd|self")
    assert "unknown model choice" in outs[-1]["note"] and "error-box" in outs[-1]["note"]


def test_handlers_name_only_components_their_event_updates():
    """app.by_name hands gradio a handler's named values in the event's output order, gr.skip() for the rest."""
    import gradio as gr

    def handler(x):
        return {"b": x}
    assert app.by_name(handler, ("a", "b", "c"))(7) == [gr.skip(), 7, gr.skip()]
    with pytest.raises(AssertionError, match="does not have"):
        app.by_name(handler, ("a",))(7)


def test_closing_a_streamed_event_closes_its_handler():
    """What gradio does when a page closes mid-run: the handler's own cleanup (stop flag, engine) runs."""
    closed = []

    def handler():
        try:
            yield {"a": 1}
            yield {"a": 2}
        finally:
            closed.append(True)
    stream = app.by_name(handler, ("a",))()
    assert next(stream) == [1]
    stream.close()
    assert closed == [True]


def test_make_config_rejects_absurd_settings():
    from core.errors import SpecError
    with pytest.raises(SpecError):
        make_config("nanospec", 0, 3, 3, 8192, 0, 4, 2, 10, 64, 0.0)  # w_max = 0
    with pytest.raises(SpecError):
        make_config("nanospec", 3072, 3, 3, 8192, 0, 4, 2, 10, 64, 99.0)  # temperature
    assert make_config("frspec", 3072, 3, 3, 8192, 0, 4, 2, 10, 64, 0.0).method == "frspec"


def _trace_of(records, method="nanospec") -> dict:
    from core.trace.stats import summarize
    return {"meta": {"method": method, "cfg": {"temperature": 0.0}, "summary": summarize(records)},
            "records": [r.to_dict() for r in records]}


def test_app_and_cli_give_one_lossless_verdict():
    """The app's badge comes from core.trace.stats.compare_to_ar (what `python -m core generate --compare-ar`
    prints): a run diverging after a common prefix and a shorter run both differ, at the same token."""
    from core.trace.live import baseline_of, lossless_verdict
    from core.trace.stats import compare_to_ar
    from core.trace.record import StepRecord
    ar = [StepRecord(step=i, kind="prefill" if i == 0 else "ar", emitted=[t], margin=[2.0])
          for i, t in enumerate([5, 6, 7, 8, 9])]
    diverging = [StepRecord(step=0, kind="prefill", emitted=[5], margin=[2.0]),
                 StepRecord(step=1, kind="step", emitted=[6, 7, 4, 9], margin=[2.0] * 4)]
    shorter = [StepRecord(step=0, kind="prefill", emitted=[5], margin=[2.0]),
               StepRecord(step=1, kind="step", emitted=[6, 7], margin=[2.0] * 2)]
    baseline = baseline_of(_trace_of(ar, "ar"))
    for spec in (diverging, shorter):
        cli = compare_to_ar(spec, ar)
        assert lossless_verdict(_trace_of(spec), baseline) == cli and not cli["identical"]
    assert compare_to_ar(diverging, ar)["first_diff"] == 3 and compare_to_ar(shorter, ar)["first_diff"] == 3
    assert lossless_verdict(_trace_of(ar[:1] + ar[1:]), baseline)["identical"]


def test_model_choices_are_a_closed_list():
    keys = [k for _, k in models.model_choices(hub=True)]
    assert all(models.parse_model_key(k) for k in keys)
    assert len(models.model_choices(hub=False)) < len(keys)


def test_examples_cover_seven_categories():
    cats = {c for c, _ in app.example_prompts()}
    assert {"conv", "mt", "summ", "qa", "math", "rag", "code"} <= cats


def test_initial_trace_is_browsable():
    t = run_tab.initial_trace()
    assert t["records"] and t["meta"]["summary"]
    panels = run_tab.replay(t, 1)
    assert set(panels) == set(PANELS) and "tok" in panels["text"]


class FakePipe:
    """Replays a synthetic trace through the Pipeline interface (no model): spec methods get the trace's
    records, ar gets the same tokens one per step, so greedy runs are lossless by construction. `methods`
    lists the method of every run."""
    model_id, draft_name, runtime_name, vocab_size = "fake", "self", "eager", 30
    drafter, model = None, SimpleNamespace(dtype="float32")  # nothing to calibrate: the cost panel says so

    def __init__(self):
        from viz.synthetic import synthetic_trace
        self.trace = synthetic_trace(n_steps=6, seed=3)
        self.methods = []

    def run(self, prompt, cfg, chat=True, should_stop=lambda: False, **kw):
        from core.trace.record import StepRecord
        self.methods.append(cfg.method)
        recs = [StepRecord.from_dict(r) for r in self.trace["records"]]
        if cfg.method == "ar":
            toks = [t for r in recs for t in r.emitted]
            recs = [StepRecord(step=i, kind="prefill" if i == 0 else "ar", emitted=[t], text=str(t))
                    for i, t in enumerate(toks)]
        for r in recs:
            if should_stop():
                r.cut = "stopped"
                yield r
                return
            yield r

    def decode_tokens(self, ids):
        return [self.trace["meta"]["vocab"].get(str(i), f"<{i}>") for i in ids]

    def prompt_ids(self, prompt, chat=True):
        return list(range(len(prompt.split())))


@pytest.fixture
def fake_pipe(monkeypatch):
    """Every model pair the app loads is a FakePipe (Pipeline.load is the one place the handlers load from)."""
    from core.pipeline import Pipeline
    pipe = FakePipe()
    monkeypatch.setattr(Pipeline, "load", lambda *a, **k: pipe)
    return pipe


def test_run_ui_streams_then_finishes_with_speedup_and_verdict_unasked(fake_pipe):
    runs._AR_CACHE.clear()
    outs = run("hello")
    final = outs[-1]
    trace, summary, files = final["trace"], final["summary"], final["files"]
    assert "your run" in final["note"] and "lossless ✓" in summary and "×" in summary
    assert len(files) == 2 and all(os.path.exists(f) for f in files)
    assert trace["meta"]["baseline"]["tokens"] == emitted_ids(trace) and len(runs._AR_CACHE) == 1
    assert run_tab.LAST_RUN_STATS["render_s"] >= 0 and run_tab.LAST_RUN_STATS["steps"] == len(trace["records"])


def test_plain_decoding_runs_once_per_prompt_and_settings(fake_pipe):
    runs._AR_CACHE.clear()
    run("hello")
    second = run("hello")
    assert fake_pipe.methods == ["nanospec", "ar", "nanospec"] and "lossless ✓" in second[-1]["summary"]


def test_live_frames_sample_the_engine_and_show_its_own_speed(fake_pipe, monkeypatch):
    import time
    real_run = fake_pipe.run

    def slow_run(*a, **k):  # an engine step every 20 ms: several frames land while it runs
        for r in real_run(*a, **k):
            time.sleep(0.02)
            yield r
    monkeypatch.setattr(fake_pipe, "run", slow_run)
    monkeypatch.setattr(run_tab, "FRAME_S", 0.03)
    outs = run("hello")
    live = [o for o in outs if "Generating" in str(o["note"])]
    assert live and "tok-bonus" in live[-1]["text"] and "tokens/s" in live[-1]["summary"]
    gen_s = outs[-1]["trace"]["meta"]["gen_s"]
    s = outs[-1]["trace"]["meta"]["summary"]
    assert abs(s["tokens_per_s"] - s["new_tokens"] / gen_s) < 1e-6


def test_compare_ui_table_plot_texts(fake_pipe):
    runs._AR_CACHE.clear()
    outs = list(compare_tab.compare_ui("hello", ["nanospec", "ar"], KEY, *default_settings(), 16, 0.0))
    table, fig, texts = outs[-1]["table"], outs[-1]["plot"], outs[-1]["texts"]
    assert "nanospec" in table and "lossless ✓" in table
    assert [t.name for t in fig.data] == ["ar", "nanospec"]
    assert texts.count("compare-col-title") == 2


def test_stop_flag_cuts_the_run(fake_pipe, monkeypatch):
    import time
    real_run = fake_pipe.run

    def slow_run(*a, **k):
        for r in real_run(*a, **k):
            time.sleep(0.05)
            yield r
    monkeypatch.setattr(fake_pipe, "run", slow_run)
    runs._STOP.clear()
    gen = run_tab.run_ui("hello", KEY, "nanospec", *default_settings(), 16, 0.0)
    next(gen)
    runs.request_stop(None)
    outs = list(gen)
    assert "stopped" in outs[-1]["summary"]


def test_finished_runs_and_stray_stops_leave_no_session_state(fake_pipe):
    runs._STOP.clear()
    run("hello", n=8)
    runs.request_stop(None)
    assert runs._STOP == {}


# ---------------------------------------------------------------- paper figures tab

@pytest.fixture
def fake_paper(monkeypatch):
    """run_paper stand-in (the grid itself is tested in test_paper.py): records its settings, writes a report."""
    seen = {}

    def run_paper(settings, progress=None, draw=None):
        seen.update(settings, draws=draw is not None)
        progress(0.5, desc="half")
        out = Path(settings["figures"])
        (out / "report.md").write_text("# SpecLens paper figures\n\n| a |\n|---|\n| 1 |\n")
        (out / "table2_speed.csv").write_text("category,method\n")
        return {"report.md": str(out / "report.md"), "table2_speed.csv": str(out / "table2_speed.csv")}
    monkeypatch.setattr(paper_tab, "run_paper", run_paper)
    return seen


def test_paper_tab_runs_the_grid_on_the_shipped_prompts_and_offers_every_file(fake_paper):
    got = paper_tab.paper_ui(KEY, None, 1, 128, [], progress=lambda *a, **k: None)
    assert "Done" in got["note"] and got["report"].startswith("# SpecLens paper figures")
    assert sorted(Path(f).name for f in got["files"]) == ["report.md", "table2_speed.csv"]
    assert "prompts" not in fake_paper and fake_paper["max_new_tokens"] == 128 and fake_paper["categories"] is None
    assert fake_paper["draws"]  # the tab hands run_paper the figures' drawing (viz.paper.draw_figures)


def test_paper_tab_uses_an_uploaded_prompt_file(fake_paper, tmp_path):
    upload = tmp_path / "spec_bench.jsonl"
    upload.write_text('{"question_id": "q1", "category": "qa", "turns": ["Why?"]}\n')
    paper_tab.paper_ui(KEY, str(upload), 2, 32, ["qa"], progress=lambda *a, **k: None)
    assert fake_paper["prompts"] == [str(upload)] and fake_paper["limit"] == 2 and fake_paper["categories"] == ["qa"]


def test_paper_tab_names_a_bad_prompt_file_instead_of_failing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    got = paper_tab.paper_ui(KEY, str(bad), 1, 16, [], progress=lambda *a, **k: None)
    assert set(got) == {"note"} and "error" in got["note"].lower() and "bad.jsonl" in got["note"]


def test_untrained_slim_factors_are_said_on_screen(default_pipeline):
    from core.trace.live import slim_factors_kind
    from viz.notes import trace_notes
    cfg = make_config("slimspec", *default_settings(), 16, 0.0)
    assert slim_factors_kind(default_pipeline, cfg) == "trained"  # the EAGLE pair ships factors at d/8
    cfg = make_config("slimspec", 3072, 3, 3, 8192, 8, 3, 2, 6, 16, 0.0)  # rank 8: none shipped
    assert slim_factors_kind(default_pipeline, cfg) == "svd"
    assert "untrained" in trace_notes({"slim_factors": "svd"})[0] and not trace_notes({"slim_factors": "trained"})


def test_a_rescoring_low_rank_head_says_so_under_its_summary():
    from viz.notes import trace_notes
    assert "top 512" in trace_notes({"cfg": {"method": "slimspec", "rescore": 512}})[0]
    assert not trace_notes({"cfg": {"method": "slimspec", "rescore": 0}})
    assert not trace_notes({"cfg": {"method": "nanospec", "rescore": 512}})


def test_a_previewing_nanospec_run_says_what_it_adds_to_the_active_vocabulary():
    from viz.notes import trace_notes
    assert "top 64" in trace_notes({"cfg": {"method": "nanospec", "preview": 64}})[0]
    assert not trace_notes({"cfg": {"method": "nanospec", "preview": 0}})


def test_switching_the_model_pair_shows_that_pairs_example_but_keeps_a_visitors_run():
    example = run_tab.initial_trace()
    got = run_tab.show_example(f"{DEFAULT_MODEL}|self", example)
    assert got["trace"]["meta"]["draft"] == "self" and "tok" in got["text"]
    own = {"meta": {"method": "nanospec"}, "records": []}
    assert run_tab.show_example(f"{DEFAULT_MODEL}|self", own) == {}  # every output keeps the visitor's run


def test_picking_the_qwen_pair_sets_the_sliders_to_its_measured_draft_defaults():
    from core.models import draft_defaults
    from ui.runs import settings_for
    pair = settings_for("qwen2.5-coder-1.5b-instruct|qwen2.5-coder-0.5b-instruct")
    assert (pair["k_pre"], pair["k_ver"]) == (draft_defaults("qwen2.5-coder-1.5b-instruct")["k_pre"],
                                              draft_defaults("qwen2.5-coder-1.5b-instruct")["k_ver"])
    assert settings_for(f"{DEFAULT_MODEL}|auto")["k_pre"] == SpecConfig().k_pre


def test_the_app_drafts_a_model_in_its_measured_shape():
    from core.models import draft_defaults
    cfg = make_config("nanospec", *default_settings("qwen2.5-coder-1.5b-instruct"), 16, 0.0,
                      model_id="qwen2.5-coder-1.5b-instruct")
    pair = draft_defaults("qwen2.5-coder-1.5b-instruct")
    assert (cfg.shape, cfg.depth, cfg.top_k, cfg.tree_size, cfg.context) == tuple(
        pair[k] for k in ("shape", "depth", "top_k", "tree_size", "context"))
    assert make_config("nanospec", *default_settings(), 16, 0.0, model_id=DEFAULT_MODEL).shape == SpecConfig().shape


def test_the_pair_switch_is_offered_only_where_the_memory_holds_the_pair(monkeypatch):
    import core.models
    from ui.models import pair_offer
    monkeypatch.setattr(core.models, "available_memory", lambda: 4 * 2**30)
    assert pair_offer() == ""
    monkeypatch.setattr(core.models, "available_memory", lambda: 64 * 2**30)
    offer = pair_offer()
    assert offer.startswith("Try a larger pair") and "GiB of memory, 64 GiB free" in offer


def test_the_draft_shape_setting_is_checked_and_reaches_the_config():
    assert make_config("nanospec", *default_settings(), 16, 0.0, "auto").shape == "auto"
    cfg = make_config("nanospec", *default_settings("qwen2.5-coder-1.5b-instruct"), 16, 0.0, "context",
                      model_id="qwen2.5-coder-1.5b-instruct")
    assert (cfg.shape, cfg.context) == ("context", "on")  # the pair's measured default is context off
    with pytest.raises(SpecError, match="draft shape"):
        make_config("nanospec", *default_settings(), 16, 0.0, "../etc")
