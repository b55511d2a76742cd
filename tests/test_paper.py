"""Paper figures: the bench's --figures grid on a tiny random model writes every figure, table and
report; each figure function draws the expected traces; the SlimSpec ν-ρ-κ model matches hand values."""
import csv
import json

import pytest
import torch

from conftest import peaky_tiny
from core.config import METHODS
from core import paper
from core.paper import runs as bench
from core.decoding.draft import ModelDrafter
from core.pipeline import Pipeline
from core.runtime.fast import make_runner
from tools.tiny import tiny_tokenizer
from viz import paper as vp

OUTPUTS = ("fig1a_oracle_vs_actual", "fig1b_coverage_vs_vocab", "fig5_wmax_sensitivity", "fig6_vocab_evolution",
           "table2_speed", "table4_latency", "table5_ablation", "table8_sources", "slimspec_nu_rho")
VOCAB = 300


@pytest.fixture(scope="module")
def pipe() -> Pipeline:
    """A Pipeline around the tiny random llama: self-draft, eager, random FR-Spec ranks."""
    model, tokenizer = peaky_tiny(0, VOCAB), tiny_tokenizer(VOCAB)
    target = make_runner(model, tokenizer, "eager")
    drafter = ModelDrafter(make_runner(model, tokenizer, "eager"), "self")
    ranks = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))
    return Pipeline("tiny-paper", model, tokenizer, target, drafter, "self", ranks)


@pytest.fixture(scope="module")
def figures(tmp_path_factory, single_thread, pipe):
    out = tmp_path_factory.mktemp("paper")
    prompts = out / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in (
        {"question_id": "a-1", "category": "conv", "turns": ["w5 w9 w17 w33 w5 w9 w40 w41"]},
        {"question_id": "b-1", "category": "code", "turns": ["w100 w101 w102 w100 w101 w7"]},
        {"question_id": "b-2", "category": "code", "turns": ["w8 w9 w10"]})) + "\n")
    settings = {"figures": str(out / "figs"), "prompts": [str(prompts)], "limit": 1, "max_new_tokens": 8,
                "model": "tiny-paper", "draft": "self", "runtime": "eager", "sweep_prompts": 1, "png": False}
    calls = []
    paths = paper.run_paper(settings, progress=lambda f, desc=None: calls.append(f), pipe=pipe, draw=vp.draw_figures)
    return out / "figs", paths, calls, settings


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_grid_writes_every_figure_table_and_the_report(figures):
    out, paths, calls, _ = figures
    for name in OUTPUTS:
        assert (out / f"{name}.csv").exists() and (out / f"{name}.html").exists()
        assert paths[f"{name}.html"] == str(out / f"{name}.html")
    assert "NanoSpec paper" in (out / "report.md").read_text()
    assert calls and calls[-1] == 1.0


def test_csv_columns_are_the_documented_ones(figures):
    out = figures[0]
    for name, cols in (("fig1a_oracle_vs_actual", paper.ORACLE_COLS), ("table2_speed", paper.SPEED_COLS),
                       ("table4_latency", paper.LATENCY_COLS), ("table5_ablation", paper.ABLATION_COLS),
                       ("slimspec_nu_rho", paper.NU_RHO_COLS), ("fig6_vocab_evolution", paper.EVOLUTION_COLS)):
        with open(out / f"{name}.csv") as f:
            assert next(csv.reader(f)) == cols


def test_limit_is_per_category_and_sweeps_run_on_the_first_prompt_only(figures):
    out = figures[0]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert {r["prompt_id"] for r in runs} == {"a-1", "b-1"}
    sweep = {r["prompt_id"] for r in runs if r["variant"] not in METHODS}
    assert sweep == {"a-1"}
    assert {r["method"] for r in read(out / "table2_speed.csv")} == set(METHODS)


def test_oracle_and_actual_coincide_for_the_full_vocabulary(figures):
    rows = read(figures[0] / "fig1a_oracle_vs_actual.csv")
    full = next(r for r in rows if r["variant"] == "full")
    assert int(full["vocab_size"]) == VOCAB
    assert float(full["oracle_tps"]) == pytest.approx(float(full["actual_tps"]), rel=1e-2)
    assert [int(r["vocab_size"]) for r in rows] == sorted(int(r["vocab_size"]) for r in rows)


def test_source_ablations_are_all_measured(figures):
    rows = {r["variant"]: r for r in read(figures[0] / "table5_ablation.csv")}
    for name in ("nanospec_context", "nanospec_extension", "nanospec_kver0"):
        assert rows[name]["status"] == "measured"


def test_the_cli_reruns_the_same_grid_without_running_anything(figures, pipe, monkeypatch):
    monkeypatch.setattr(bench, "pipeline_from", lambda args: pipe)
    out, _, _, s = figures
    before = (out / "runs.jsonl").read_text()
    argv = ["--figures", s["figures"], "--prompts", *s["prompts"], "--limit", "1", "--max-new-tokens", "8", "--model",
            "tiny-paper", "--draft", "self", "--runtime", "eager", "--sweep-prompts", "1", "--no-png"]
    assert paper.main(argv) == 0
    assert (out / "runs.jsonl").read_text() == before


def test_predicted_speedup_matches_hand_computation():
    # ρ_τ(1+κ)/(1+νκ): κ = 1, ν = 0.5, ρ = 0.9 -> 0.9·2/1.5 = 1.2
    assert paper.predicted_speedup(0.5, 0.9, 1.0) == pytest.approx(1.2)
    assert paper.predicted_speedup(1.0, 1.0, 0.37) == pytest.approx(1.0)  # Full against itself
    assert paper.predicted_speedup(0.0, 1.0, 0.25) == pytest.approx(1.25)  # a free head gains 1+κ
    assert vp.iso_speedup_rho(0.5, 1.2, 1.0) == pytest.approx(0.9)  # the iso curve inverts it


def test_nu_rho_table_from_hand_made_runs():
    def run(method, tau_steps, head_ms, other_ms, calls, wall):
        return {"variant": method, "method": method, "steps": 10, "step_tokens": tau_steps, "new_tokens": tau_steps,
                "wall_s": wall, "draft_calls": calls, "covered": 0, "coverable": 0, "trace": {"active": []},
                "timing_ms": {"draft_backbone": other_ms, "lm_head": head_ms, "gather": 0, "verify": 0, "other": 0}}
    rows, kappa = paper.nu_rho_table([run("full", 30, 50, 100, 40, 1.0), run("frspec", 27, 10, 100, 40, 0.8)])
    assert kappa == pytest.approx(0.5)  # 50 / 100
    fr = next(r for r in rows if r["method"] == "frspec")
    assert (fr["nu"], fr["rho"]) == (pytest.approx(0.2), pytest.approx(0.9))
    assert fr["predicted"] == pytest.approx(0.9 * 1.5 / 1.1, abs=1e-4)
    assert fr["measured"] == pytest.approx(27 / 0.8 / 30, abs=1e-4)


def test_each_figure_has_the_expected_traces():
    oracle = [{"vocab_size": v, "actual_tps": 1.0, "oracle_tps": 1.2} for v in (1024, 8192)]
    assert [t.name for t in vp.fig_oracle_vs_actual(oracle, {"active": 900, "tokens_per_s": 1.1}).data] == [
        "actual (FR-Spec)", "oracle ᾱ_full / (T_verify + T_draft(V′))", "NanoSpec (mean |I_t|)"]
    cov = [{"category": c, "kind": k, "vocab_size": 1000, "coverage": 0.8} for c in ("conv", "code") for k in ("frspec", "nanospec")]
    assert [t.name for t in vp.fig_coverage_vs_vocab(cov).data] == [
        "FR-Spec · conv", "NanoSpec · conv", "FR-Spec · code", "NanoSpec · code"]
    wmax = [{"w_max": w, "mean_accept_len": 2.0, "tokens_per_s": 3.0} for w in (512, 1024)]
    assert [t.name for t in vp.fig_wmax_sensitivity(wmax).data] == ["acceptance length", "tokens/s"]
    evo = [{"category": "conv", "step": s, **{f"{k}_{a}": 1.0 for k in ("active", "coverage") for a in ("mean", "min", "max")}}
           for s in (1, 2)]
    assert [t.name for t in vp.fig_vocab_evolution(evo).data] == ["conv min–max", "conv"] * 2
    speed = [{"category": "conv", "method": m, "speedup_vs_ar": 1.1, "tokens_per_s": 5.0, "mean_accept_len": 2.0}
             for m in ("full", "nanospec")]
    assert [t.name for t in vp.fig_speed_table(speed).data] == ["full", "nanospec"]
    lat = [{"method": "full", "backbone_ms": 1.0, "gather_ms": 0.0, "lm_head_ms": 0.5}]
    assert [t.name for t in vp.fig_latency_table(lat).data] == ["backbone", "gather", "lm_head"]
    nu = [{"method": "frspec", "nu": 0.2, "rho": 0.9, "predicted": 1.2, "measured": 1.1}]
    names = [t.name for t in vp.fig_nu_rho(nu, 0.5, levels=(1.0, 1.2)).data]
    assert names == ["speedup 1×", "speedup 1.2×", "frspec", "frspec", "y = x"]
    assert vp.fig_table([{"a": 1.5}], ["a"], "t").data[0].type == "table"


def test_bench_keeps_its_csv_columns_and_accepts_figures_instead_of_out():
    assert bench.SUMMARY_COLS[:3] == ["category", "method", "n_prompts"]
    assert bench.parse(["--figures", "x"]).out is None
    with pytest.raises(SystemExit):
        bench.parse([])


def test_the_paper_grid_runs_the_papers_slimspec_unless_rescoring_is_asked_for():
    from core.prompts import Prompt
    prompts = [Prompt("c-1", "code", "def f():")]
    model = ["--figures", "x", "--model", "qwen2.5-coder-1.5b-instruct"]
    assert bench.config_from(bench.parse(model), "slimspec").rescore > 0  # the pair's measured default rescores
    jobs = paper.plan(bench.parse(model), prompts)
    assert {cfg.rescore for _, _, cfg in jobs} == {0} and {cfg.context for _, _, cfg in jobs} == {"off"}
    jobs = paper.plan(bench.parse(model + ["--rescore", "64"]), prompts)
    assert {cfg.rescore for _, name, cfg in jobs if name == "slimspec"} == {64}


def test_the_paper_grid_runs_the_papers_nanospec_unless_a_preview_is_asked_for():
    from core.prompts import Prompt
    prompts = [Prompt("c-1", "code", "def f():")]
    model = ["--figures", "x", "--model", "qwen2.5-coder-1.5b-instruct"]
    assert {cfg.preview for _, _, cfg in paper.plan(bench.parse(model), prompts)} == {0}
    jobs = paper.plan(bench.parse(model + ["--preview", "32"]), prompts)
    assert {cfg.preview for _, name, cfg in jobs if name == "nanospec"} == {32}
