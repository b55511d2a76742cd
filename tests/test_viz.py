"""viz/: pure functions from synthetic trace dicts to HTML and Plotly figures (no model, no gradio)."""
import json
import re

import plotly.graph_objects as go
import pytest

from imports import external_imports, modules_under
from viz import plots
from viz.learn import learn_figure, learn_markdown
from viz.panels import PANELS, render_panels
from viz.stream import arrival_log, render_stream, s_entries
from viz.summary import accepted_by_origin, compare_table, lm_head_share, summary_cards, vocab_misses
from viz.synthetic import synthetic_trace
from viz.text import rejected_nodes, render_text
from core.trace.file import load_trace, missing_ids, round_floats, save_trace
from viz.tree import render_tree


@pytest.fixture
def trace():
    return synthetic_trace(n_steps=12, seed=1, w_max=30)


@pytest.fixture
def raw_trace():
    return synthetic_trace(n_steps=12, seed=1, w_max=30, raw_stream=True)


@pytest.mark.parametrize("module", modules_under("viz"))
def test_viz_does_not_import_torch_gradio_or_transformers(module):
    """Through any project module it imports too, at module level or inside a function."""
    assert not external_imports(module) & {"torch", "gradio", "transformers"}


def test_text_has_token_classes_and_titles(trace):
    html = render_text(trace)
    for cls in ("tok-prompt", "tok-acc", "tok-rej", "tok-bonus"):
        assert f"tok {cls}" in html, cls
    assert re.search(r'<del class="tok tok-rej" title="step \d+ · rejected draft · draft p=0\.\d\d', html)
    assert re.search(r'class="tok tok-acc" title="step \d+ · accepted draft · draft p=[0-9.]+ · in active vocab: (yes|NO)', html)
    assert "legend" in html and "step-now" not in html


def test_text_counts_match_trace(trace):
    html = render_text(trace, legend=False)
    recs = trace["records"]
    n_acc = sum(len(r["emitted"]) - 1 for r in recs if r["kind"] == "step")
    n_rej = sum(len(rejected_nodes(r)) for r in recs)
    n_bonus = len(recs)
    assert html.count("tok tok-acc") == n_acc
    assert html.count("tok tok-rej") == n_rej
    assert html.count("tok tok-bonus") == n_bonus


def test_text_replay_stops_at_step_and_marks_it(trace):
    html = render_text(trace, 3)
    assert 'data-step="3"' in html and 'data-step="4"' not in html
    assert 'class="step-group step-now" data-step="3"' in html


def test_text_escapes_html():
    t = synthetic_trace(n_steps=2)
    t["meta"]["vocab"]["0"] = "<script>alert(1)</script>"
    t["meta"]["prompt"] = "<b>hi</b>"
    t["records"][0]["emitted"] = [0]
    html = render_text(t)
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;hi" in html


def test_rejected_nodes_are_children_of_last_accepted():
    rec = {"tree": {"tokens": [5, 6, 7, 8], "parents": [-1, -1, 0, 0]}, "accepted": [0], "emitted": [5, 9]}
    assert rejected_nodes(rec) == [2, 3]
    rec["accepted"] = []
    assert rejected_nodes(rec) == [0, 1]


def test_stream_arrival_log_window(trace):
    html = render_stream(trace, 8)
    assert 'class="stream-window"' in html and "chip-new" in html
    for k in ("|S|", "|I_t|", "entered", "left"):
        assert f"<b>{k}</b>" in html
    log, live = arrival_log(trace["records"][:9])
    assert sum(live) == trace["records"][8]["stream"]["active"]
    window = html.split('class="stream-window"', 1)[1].split('</div>', 1)[0]
    assert window.count('class="chip ') == sum(live)


def test_stream_raw_chunks_window(raw_trace):
    html = render_stream(raw_trace, 8, max_chips=10_000)
    entries = s_entries(raw_trace["records"][:9])
    assert len(entries) == raw_trace["records"][8]["stream"]["size_s"]
    window = html.split('class="stream-window"', 1)[1].split('</div>', 1)[0]
    assert window.count('class="chip ') == 30  # w_max
    assert "chip-out" in html and "src-prompt" in html and "src-verify" in html


def test_stream_caps_chips(trace):
    html = render_stream(trace, None, max_chips=10)
    assert html.count('<span class="chip src-') <= 10 + 4  # + 4 legend chips
    assert "earlier" in html


def test_stream_empty_for_methods_without_stream():
    t = synthetic_trace(n_steps=3, method="frspec")
    for r in t["records"]:
        r["stream"] = {"entered": [], "left": [], "size_s": 0, "active": 0}
    assert "stream-empty" in render_stream(t)


def test_tree_svg(trace):
    step = next(i for i, r in enumerate(trace["records"]) if r["accepted"])
    html = render_tree(trace, step)
    assert "<svg" in html and "node-acc" in html and "node-bonus" in html and "edge-acc" in html
    assert "<title>" in html
    assert "tree-empty" in render_tree(trace, 0)  # prefill: no tree


def test_tree_marks_out_of_vocab(trace):
    rec = trace["records"][2]
    rec["tree"]["in_vocab"] = [False] * len(rec["tree"]["tokens"])
    assert render_tree(trace, 2).count("node-oov") >= len(rec["tree"]["tokens"])


def test_figures_have_expected_traces(trace):
    recs = trace["records"]
    cov = plots.coverage_fig(recs, fr_size=12, step=5)
    assert isinstance(cov, go.Figure)
    assert [t.name for t in cov.data] == ["NanoSpec I_t", "FR-Spec K=12", "FR-Spec K=|I_t|", "full vocab"]
    assert all(v == 100.0 for v in cov.data[-1].y)
    assert [t.name for t in plots.active_vocab_fig(recs).data] == ["|I_t|", "|S|"]
    acc = plots.accept_len_fig(recs)
    assert [t.name for t in acc.data] == ["tokens this step", "running mean"]
    assert list(acc.data[0].y) == [len(r["emitted"]) for r in recs[1:]]
    tim = plots.timing_fig(recs)
    assert [t.name for t in tim.data] == ["draft backbone", "lm head", "gather", "verify", "other"]
    assert tim.layout.barmode == "stack"


def test_coverage_values(trace):
    recs = trace["records"]
    cov = plots.coverage_fig(recs, fr_size=10**9)
    assert cov.data[1].y[-1] == 100.0  # every rank < huge K
    flags = [v for r in recs if r["kind"] == "step" for v in r["emitted_in_vocab"]]
    assert cov.data[0].y[-1] == pytest.approx(100.0 * sum(flags) / len(flags))


def test_compare_coverage_one_line_per_method(trace):
    fig = plots.compare_coverage_fig({"ar": trace["records"], "nanospec": trace["records"]})
    assert [t.name for t in fig.data] == ["ar", "nanospec"]
    assert fig.data[0].y[-1] == 100.0


def test_a_method_has_one_colour_in_the_app_and_in_the_paper_figures(trace):
    from viz import paper
    methods = ["ar", "full", "frspec", "nanospec", "slimspec", "nanoslim"]
    app_fig = plots.compare_coverage_fig({m: trace["records"] for m in methods})
    paper_fig = paper.fig_speed_table([{"category": "conv", "method": m, "speedup_vs_ar": 1.0, "tokens_per_s": 1.0,
                                        "mean_accept_len": 1.0} for m in methods])
    app_colours = {t.name: t.line.color for t in app_fig.data}
    assert {t.name: t.marker.color for t in paper_fig.data} == app_colours
    assert len(set(app_colours.values())) == len(methods)


def test_figures_html_is_standalone(trace):
    page = plots.figures_html([plots.accept_len_fig(trace["records"])])
    assert page.startswith("<!doctype html>") and "plotly" in page


def test_render_panels_all(trace):
    out = render_panels(trace, 4)
    assert set(out) == set(PANELS)
    assert all(isinstance(out[k], go.Figure) for k in ("coverage", "active", "accept", "timing"))


def test_summary_cards():
    s = {"tokens_per_s": 20.0, "mean_accept_len": 2.5, "mean_active_vocab": 812.0, "coverage": 0.97,
         "timing_ms": {"draft_backbone": 30, "lm_head": 10, "gather": 0, "verify": 60, "other": 0},
         "new_tokens": 40, "steps": 16, "cut": ""}
    assert lm_head_share(s) == pytest.approx(0.25)
    html = summary_cards(s, "nanospec", baseline={"tokens_per_s": 10.0},
                         lossless={"identical": True, "first_diff": None, "tie": False})
    assert "2.00×" in html and "lossless ✓" in html and "97.0%" in html and "25%" in html
    assert "—" in summary_cards(s)  # no baseline: no speedup
    assert "summary-empty" in summary_cards({})
    table = compare_table([{"method": "nanospec", "summary": s, "speedup": 1.5,
                            "lossless": {"identical": False, "first_diff": 7, "tie": False}}])
    assert "1.50×" in table and "differs from AR at token 7" in table


def test_the_summary_warns_where_the_fused_kernels_are_off_with_the_reason_and_cost():
    s = {"tokens_per_s": 20.0, "new_tokens": 40, "steps": 16, "cut": ""}
    note = "fast fp32, torch ops (fused kernels off: cc -march=native failed: q.c:3: boom — 2-12x slower), exact"
    html = summary_cards(s, "ar", runtime=note)
    assert '<span class="badge badge-warn kernels-off">fused kernels off: cc -march=native failed: q.c:3: boom — 2-12x ' \
           'slower</span>' in html
    assert "kernels-off" not in summary_cards(s, "ar", runtime="fast bf16 on its GGUF codes (avx512-vnni-int8), exact")


def test_trace_file_roundtrip(tmp_path, trace):
    p = save_trace(round_floats(trace), tmp_path / "t.json")
    back = load_trace(p)
    assert back["records"][3]["emitted"] == trace["records"][3]["emitted"]
    assert json.loads(p.read_text())["meta"]["vocab"]
    assert missing_ids(back, back["records"][3]) == []


def test_learn_content():
    md = learn_markdown()
    assert "NanoSpec" in md and "SlimSpec" in md and "κ" in md and "ν" in md and "ρ" in md
    assert "tok-acc" in learn_figure()


def test_coverage_without_frequency_table(trace):
    for r in trace["records"]:
        r["emitted_fr_rank"] = [-1] * len(r["emitted"])  # the engine's "no FR-Spec table"
    names = [t.name for t in plots.coverage_fig(trace["records"], fr_size=8192).data]
    assert names == ["NanoSpec I_t", "full vocab"]


def test_chip_labels_show_whitespace_on_one_line():
    from viz.tokens import chip_label
    assert chip_label({"1": "\n\tx\r\u2028"}, 1) == "↵⇥x␍␣"
    assert chip_label({"1": "  "}, 1) == "··"
    assert len(chip_label({"1": "a" * 40}, 1)) == 12


def test_summary_footer_names_the_runtime_and_why():
    html = summary_cards({"new_tokens": 4, "steps": 2}, "nanospec", runtime="eager (fast runtime does not cover gemma2)")
    assert "runtime: eager (fast runtime does not cover gemma2)" in html


def _step(emitted, in_vocab, accepted, tree_tokens, parents, origin=None):
    tree = {"tokens": tree_tokens, "parents": parents, "logp": [-0.1] * len(tree_tokens),
            "in_vocab": [True] * len(tree_tokens)}
    if origin is not None:
        tree["origin"] = origin
    return {"step": 1, "kind": "step", "tree": tree, "accepted": accepted, "emitted": emitted,
            "emitted_in_vocab": in_vocab, "emitted_draft_p": [0.9] * (len(emitted) - 1) + [None]}


def _trace_of(*recs):
    vocab = {str(i): f"w{i}" for i in range(10)}
    return {"meta": {"prompt": "p", "vocab": vocab, "method": "frspec"}, "records": list(recs)}


def test_a_correction_outside_the_draft_vocabulary_is_a_vocabulary_miss():
    # node 0 accepted, node 1 (child of 0) rejected, the target's correction 7 lay outside I_t
    html = render_text(_trace_of(_step([3, 7], [True, False], [0], [3, 4], [-1, 0])))
    assert re.search(r'class="tok tok-bonus tok-vmiss" title="[^"]*outside I_t: no draft could propose it', html)
    assert "drafts rejected here: &#x27;w4&#x27;" in html  # the rejected draft, one hover away


def test_a_correction_inside_the_draft_vocabulary_is_a_model_miss():
    html = render_text(_trace_of(_step([3, 7], [True, True], [0], [3, 4], [-1, 0])), legend=False)
    assert "tok-vmiss" not in html and "target correction" in html


def test_vocab_miss_card_counts_corrections_outside_I_t():
    recs = [_step([3, 7], [True, False], [0], [3, 4], [-1, 0]), _step([3, 7], [True, True], [0], [3, 4], [-1, 0]),
            _step([3, 4, 8], [True, True, False], [0, 1], [3, 4], [-1, 0])]  # a bonus after full acceptance
    assert vocab_misses(recs) == (1, 2)
    s = {"tokens_per_s": 1.0, "new_tokens": 7, "steps": 3}
    assert ">1 / 2<" in summary_cards(s, "frspec", records=recs)


def test_context_drafted_tokens_are_marked_and_counted_by_origin():
    rec = _step([3, 4, 7], [True, True, True], [0, 1], [3, 4, 5], [-1, 0, 0], origin=["model", "context", "model"])
    html = render_text(_trace_of(rec))
    assert html.count("tok-acc tok-ctx") == 1 + 1  # the token and its legend key
    assert accepted_by_origin([rec]) == {"model": 1, "context": 1}
    assert accepted_by_origin([_step([3, 7], [True, True], [0], [3, 4], [-1, 0])]) == {}
    assert "1 from context" in summary_cards({"new_tokens": 3, "steps": 1}, "nanospec", records=[rec])
