"""DIR/report.md: the settings, the paper's numbers beside ours, every table and one paragraph per figure."""
from core.paper.ablation import ABLATION_COLS
from core.paper.coverage_vs_vocab import p_coverage
from core.paper.grid import PAPER
from core.paper.latency_table import LATENCY_COLS, _change
from core.paper.nu_rho import NU_RHO_COLS, p_nu_rho
from core.paper.numbers import md_table, span
from core.paper.oracle_vs_actual import p_oracle
from core.paper.sources import SOURCE_COLS
from core.paper.speed_table import SPEED_COLS
from core.paper.vocab_evolution import p_evolution
from core.paper.wmax_sensitivity import p_wmax


def report_text(t: dict, meta: dict) -> str:
    """report.md: settings, the papers' numbers beside ours, every table, one paragraph per figure."""
    parts = [f"# SpecLens paper figures\n\nModel **{meta['model']}**, draft **{meta['draft']}**, runtime "
             f"{meta['runtime']}, CPU with {meta['threads']} torch thread(s); {meta['prompts']} prompts "
             f"({', '.join(meta['categories'])}), max {meta['max_new_tokens']} new tokens, {meta['runs']} runs; "
             f"sweeps on {', '.join(meta['sweep_prompts']) or 'no prompts'}. Greedy decoding (lossless), so every "
             f"method emits the same tokens; only acceptance and time differ. Timings on a shared CPU are noisy: "
             f"compare ratios within this run. The {meta['runs']} generations took {meta['grid_s'] / 60:.1f} min of wall "
             f"time (this invocation {meta['elapsed_s'] / 60:.1f} min: finished runs are not rerun). {meta['png_note']}\n",
             headline(t, meta), "## Table 2: speed per category\n\n" + md_table(t["table2_speed"], SPEED_COLS),
             "## Table 4: draft-step latency (ms per LM-head call)\n\n" + md_table(t["table4_latency"], LATENCY_COLS),
             "## Table 5: stream sources and LM-head layout\n\n" + md_table(t["table5_ablation"], ABLATION_COLS)
             + "\n`context` keeps only prompt + prefill in S, `extension` only draft + verify "
             "(`--sources`).\n",
             "## Table 8: where the ids entering I_t come from (shares by source)\n\n"
             + md_table(t["table8_sources"], SOURCE_COLS) + "\nDraft-tree ids are drawn from I_t, so they "
             "re-enter S but are never new to I_t; entries_per_step counts new ids per decode step.\n",
             "## SlimSpec ν–ρ–κ\n\n" + md_table(t["slimspec_nu_rho"], NU_RHO_COLS),
             "## Figures\n\n" + "\n\n".join(figure_paragraphs(t, meta)) + "\n"]
    return "\n".join(parts)


def headline(t, meta) -> str:
    """The paper's NanoSpec numbers (their models and GPUs) beside ours."""
    cov = [r for r in t["fig1b_coverage_vs_vocab"] if r["kind"] == "nanospec"]
    lat = {r["method"]: r for r in t["table4_latency"]}
    speed = {(r["category"], r["method"]): r for r in t["table2_speed"]}
    draft = (f"LM head {_change(lat, 'lm_head_ms')}, whole draft step {_change(lat, 'total_ms')} (NanoSpec vs Full)"
             if "nanospec" in lat and "full" in lat else "n/a")
    vs_full = [speed[(c, "nanospec")]["tokens_per_s"] / speed[(c, "full")]["tokens_per_s"]
               for c, m in speed if m == "nanospec" and c != "all" and (c, "full") in speed
               and speed[(c, "full")]["tokens_per_s"]]
    vs_ar = [r["speedup_vs_ar"] for r in t["table2_speed"] if r["method"] == "nanospec" and r["category"] != "all"]
    rows = [("active vocabulary |I_t| (mean, per category)", PAPER["active"], span([r["vocab_size"] for r in cov], "{:.0f}")),
            ("coverage of generated tokens (per category)", PAPER["coverage"], span([r["coverage"] for r in cov], "{:.1%}")),
            ("draft time vs full-vocabulary head", PAPER["draft_time"], draft),
            ("end-to-end speedup (per category)", PAPER["speedup"],
             f"{span(vs_full, '{:.2f}×')} vs Full, {span(vs_ar, '{:.2f}×')} vs AR")]
    lines = ["## NanoSpec's numbers beside ours\n",
             "| quantity | NanoSpec paper (their models, GPU) | SpecLens (this run: " + f"{meta['model']}, {meta['draft']} draft, CPU) |",
             "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


def figure_paragraphs(t, meta) -> list:
    return [p_oracle(t["fig1a_oracle_vs_actual"], meta), p_coverage(t["fig1b_coverage_vs_vocab"]),
            p_wmax(t["fig5_wmax_sensitivity"]), p_evolution(t["fig6_vocab_evolution"]),
            p_nu_rho(t["slimspec_nu_rho"], meta["kappa"])]
