"""app.py: the named `generate` endpoint driven through gradio_client against a launched app, and input errors."""
import os
from pathlib import Path

import pytest

import app
from conftest import served_app

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


def out(values: list) -> dict:
    """A Run-tab output list by component name."""
    return dict(zip(app.RUN_OUT, values))


def run(prompt, method="nanospec", n=16) -> list:
    return [out(o) for o in app.run_ui(prompt, f"{app.DEFAULT_MODEL}|auto", method, *app._default_settings(), n, 0.0)]


def test_run_ui_reports_errors_without_raising():
    outs = [out(o) for o in app.run_ui("", f"{app.DEFAULT_MODEL}|auto", "nanospec", *app._default_settings(), 16, 0.0)]
    assert len(outs) == 1 and "prompt is empty" in outs[0]["note"] and "error-box" in outs[0]["note"]
    outs = [out(o) for o in app.run_ui("hi", "/etc/passwd|self", "nanospec", *app._default_settings(), 16, 0.0)]
    assert "unknown model choice" in outs[-1]["note"] and "error-box" in outs[-1]["note"]


def test_make_config_rejects_absurd_settings():
    from core.errors import SpecError
    with pytest.raises(SpecError):
        app.make_config("nanospec", 0, 3, 3, 8192, 0, 4, 2, 10, 64, 0.0)  # w_max = 0
    with pytest.raises(SpecError):
        app.make_config("nanospec", 3072, 3, 3, 8192, 0, 4, 2, 10, 64, 99.0)  # temperature
    assert app.make_config("frspec", 3072, 3, 3, 8192, 0, 4, 2, 10, 64, 0.0).method == "frspec"


def _trace_of(records, method="nanospec") -> dict:
    from core.stats import summarize
    return {"meta": {"method": method, "cfg": {"temperature": 0.0}, "summary": summarize(records)},
            "records": [r.to_dict() for r in records]}


def test_app_and_cli_give_one_lossless_verdict():
    """The app's badge comes from core.stats.compare_to_ar (what `python -m core generate --compare-ar`
    prints): a run diverging after a common prefix and a shorter run both differ, at the same token."""
    from core.stats import compare_to_ar
    from core.trace import StepRecord
    ar = [StepRecord(step=i, kind="prefill" if i == 0 else "ar", emitted=[t], margin=[2.0])
          for i, t in enumerate([5, 6, 7, 8, 9])]
    diverging = [StepRecord(step=0, kind="prefill", emitted=[5], margin=[2.0]),
                 StepRecord(step=1, kind="step", emitted=[6, 7, 4, 9], margin=[2.0] * 4)]
    shorter = [StepRecord(step=0, kind="prefill", emitted=[5], margin=[2.0]),
               StepRecord(step=1, kind="step", emitted=[6, 7], margin=[2.0] * 2)]
    baseline = app.baseline_of(_trace_of(ar, "ar"))
    for spec in (diverging, shorter):
        cli = compare_to_ar(spec, ar)
        assert app.lossless_verdict(_trace_of(spec), baseline) == cli and not cli["identical"]
    assert compare_to_ar(diverging, ar)["first_diff"] == 3 and compare_to_ar(shorter, ar)["first_diff"] == 3
    assert app.lossless_verdict(_trace_of(ar[:1] + ar[1:]), baseline)["identical"]


def test_model_choices_are_a_closed_list():
    keys = [k for _, k in app.model_choices(hub=True)]
    assert all(app.parse_model_key(k) for k in keys)
    assert len(app.model_choices(hub=False)) < len(keys)


def test_examples_cover_seven_categories():
    cats = {c for c, _ in app.example_prompts()}
    assert {"conv", "mt", "summ", "qa", "math", "rag", "code"} <= cats


def test_initial_trace_is_browsable():
    t = app.initial_trace()
    assert t["records"] and t["meta"]["summary"]
    vals = app.replay(t, 1)
    assert len(vals) == 7 and "tok" in vals[0]


class FakePipe:
    """Replays a synthetic trace through the Pipeline interface (no model): spec methods get the trace's
    records, ar gets the same tokens one per step, so greedy runs are lossless by construction."""
    model_id, draft_name, runtime_name, vocab_size = "fake", "self", "eager", 30

    def __init__(self):
        from viz.synthetic import synthetic_trace
        self.trace = synthetic_trace(n_steps=6, seed=3)

    def run(self, prompt, cfg, chat=True, should_stop=lambda: False, **kw):
        from core.trace import StepRecord
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


@pytest.fixture
def fake_pipe(monkeypatch):
    pipe = FakePipe()
    monkeypatch.setattr(app, "load_pipeline", lambda key: pipe)
    return pipe


def test_run_ui_streams_then_finishes_with_speedup_and_verdict_unasked(fake_pipe):
    app._AR_CACHE.clear()
    outs = run("hello")
    final = outs[-1]
    trace, summary, files = final["trace"], final["summary"], final["files"]
    assert "your run" in final["note"] and "lossless ✓" in summary and "×" in summary
    assert len(files) == 2 and all(os.path.exists(f) for f in files)
    assert trace["meta"]["baseline"]["tokens"] == app.emitted_ids(trace) and len(app._AR_CACHE) == 1
    assert app.LAST_RUN_STATS["render_s"] >= 0 and app.LAST_RUN_STATS["steps"] == len(trace["records"])


def test_plain_decoding_runs_once_per_prompt_and_settings(fake_pipe, monkeypatch):
    app._AR_CACHE.clear()
    calls = []
    real = app.run_to_end
    monkeypatch.setattr(app, "run_to_end", lambda pipe, p, cfg, *a: calls.append(cfg.method) or real(pipe, p, cfg, *a))
    run("hello")
    second = run("hello")
    assert calls == ["ar"] and "lossless ✓" in second[-1]["summary"]


def test_live_frames_sample_the_engine_and_show_its_own_speed(fake_pipe, monkeypatch):
    import time
    real_run = fake_pipe.run

    def slow_run(*a, **k):  # an engine step every 20 ms: several frames land while it runs
        for r in real_run(*a, **k):
            time.sleep(0.02)
            yield r
    monkeypatch.setattr(fake_pipe, "run", slow_run)
    monkeypatch.setattr(app, "FRAME_S", 0.03)
    outs = run("hello")
    live = [o for o in outs if "Generating" in str(o["note"])]
    assert live and "tok-bonus" in live[-1]["text"] and "tokens/s" in live[-1]["summary"]
    gen_s = outs[-1]["trace"]["meta"]["gen_s"]
    s = outs[-1]["trace"]["meta"]["summary"]
    assert abs(s["tokens_per_s"] - s["new_tokens"] / gen_s) < 1e-6


def test_compare_ui_table_plot_texts(fake_pipe):
    app._AR_CACHE.clear()
    outs = list(app.compare_ui("hello", ["nanospec", "ar"], f"{app.DEFAULT_MODEL}|auto",
                               *app._default_settings(), 16, 0.0))
    table, fig, texts = outs[-1]
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
    app._STOP.clear()
    gen = app.run_ui("hello", f"{app.DEFAULT_MODEL}|auto", "nanospec", *app._default_settings(), 16, 0.0)
    next(gen)
    app.request_stop(None)
    outs = [out(o) for o in gen]
    assert "stopped" in outs[-1]["summary"]


def test_finished_runs_and_stray_stops_leave_no_session_state(fake_pipe):
    app._STOP.clear()
    run("hello", n=8)
    app.request_stop(None)
    assert app._STOP == {}


# ---------------------------------------------------------------- paper figures tab

@pytest.fixture
def fake_paper(monkeypatch):
    """run_paper stand-in (the grid itself is tested in test_paper.py): records its settings, writes a report."""
    seen = {}

    def run_paper(settings, progress=None):
        seen.update(settings)
        progress(0.5, desc="half")
        out = Path(settings["figures"])
        (out / "report.md").write_text("# SpecLens paper figures\n\n| a |\n|---|\n| 1 |\n")
        (out / "table2_speed.csv").write_text("category,method\n")
        return {"report.md": str(out / "report.md"), "table2_speed.csv": str(out / "table2_speed.csv")}
    monkeypatch.setattr(app, "run_paper", run_paper)
    return seen


def test_paper_tab_runs_the_grid_on_the_shipped_prompts_and_offers_every_file(fake_paper):
    note, report, files = app.paper_ui(f"{app.DEFAULT_MODEL}|auto", None, 1, 128, [], progress=lambda *a, **k: None)
    assert "Done" in note and report.startswith("# SpecLens paper figures")
    assert sorted(Path(f).name for f in files) == ["report.md", "table2_speed.csv"]
    assert "prompts" not in fake_paper and fake_paper["max_new_tokens"] == 128 and fake_paper["categories"] is None


def test_paper_tab_uses_an_uploaded_prompt_file(fake_paper, tmp_path):
    upload = tmp_path / "spec_bench.jsonl"
    upload.write_text('{"question_id": "q1", "category": "qa", "turns": ["Why?"]}\n')
    app.paper_ui(f"{app.DEFAULT_MODEL}|auto", str(upload), 2, 32, ["qa"], progress=lambda *a, **k: None)
    assert fake_paper["prompts"] == [str(upload)] and fake_paper["limit"] == 2 and fake_paper["categories"] == ["qa"]


def test_paper_tab_names_a_bad_prompt_file_instead_of_failing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    note, _, _ = app.paper_ui(f"{app.DEFAULT_MODEL}|auto", str(bad), 1, 16, [], progress=lambda *a, **k: None)
    assert "error" in note.lower() and "bad.jsonl" in note


def test_untrained_slim_factors_are_said_on_screen(default_pipeline):
    from core.example import slim_factors_kind
    cfg = app.make_config("slimspec", *app._default_settings(), 16, 0.0)
    assert slim_factors_kind(default_pipeline, cfg) == "trained"  # the EAGLE pair ships factors at d/8
    cfg = app.make_config("slimspec", 3072, 3, 3, 8192, 8, 3, 2, 6, 16, 0.0)  # rank 8: none shipped
    assert slim_factors_kind(default_pipeline, cfg) == "svd"
    assert "untrained" in app.trace_notes({"slim_factors": "svd"})[0] and not app.trace_notes({"slim_factors": "trained"})


def test_switching_the_model_pair_shows_that_pairs_example_but_keeps_a_visitors_run():
    example = app.initial_trace()
    got = out(app.show_example(f"{app.DEFAULT_MODEL}|self", example))
    assert got["trace"]["meta"]["draft"] == "self" and "tok" in got["text"]
    own = {"meta": {"method": "nanospec"}, "records": []}
    assert all(v == app.gr.skip() for v in app.show_example(f"{app.DEFAULT_MODEL}|self", own))
