"""The paper experiments end to end (python -m core bench --figures DIR): run or resume the grid, reduce its rows to
tables, write CSV, the figures that `draw` returns (HTML, PNG where kaleido renders) and report.md."""
import importlib.util
import sys
import time
from pathlib import Path
from typing import Protocol

import core.paper.runs as runner
from core.paper.ablation import ABLATION_COLS, ablation_table, gemm_vs_repack
from core.paper.coverage_vs_vocab import COVERAGE_COLS, coverage_table
from core.paper.grid import DEFAULT_LIMIT, _of, plan, run_grid, settings_from, sweep_prompts
from core.paper.latency_table import LATENCY_COLS, latency_table
from core.paper.nu_rho import NU_RHO_COLS, nu_rho_table
from core.paper.oracle_vs_actual import ORACLE_COLS, oracle_table
from core.paper.report import report_text
from core.paper.sources import SOURCE_COLS, sources_table
from core.paper.speed_table import SPEED_COLS, speed_table
from core.paper.vocab_evolution import EVOLUTION_COLS, evolution_table
from core.paper.wmax_sensitivity import WMAX_COLS, wmax_table
from core.errors import SpecError
from core.trace.stats import aggregate


def make_tables(rows, pipe, base, ids, gemm) -> dict:
    """name -> (columns, rows) for every output; `ids` = the sweep prompts' ids."""
    nu_rho, kappa = nu_rho_table(rows)
    return {"fig1a_oracle_vs_actual": (ORACLE_COLS, oracle_table(rows, ids, pipe.vocab_size, base.fr_size)),
            "fig1b_coverage_vs_vocab": (COVERAGE_COLS, coverage_table(rows, pipe.vocab_size)),
            "fig5_wmax_sensitivity": (WMAX_COLS, wmax_table(rows, ids, base.w_max)),
            "fig6_vocab_evolution": (EVOLUTION_COLS, evolution_table(rows)),
            "table2_speed": (SPEED_COLS, speed_table(rows)),
            "table4_latency": (LATENCY_COLS, latency_table(rows)),
            "table5_ablation": (ABLATION_COLS, ablation_table(rows, ids, gemm)),
            "table8_sources": (SOURCE_COLS, sources_table(rows)),
            "slimspec_nu_rho": (NU_RHO_COLS, nu_rho)}, kappa


class Draw(Protocol):
    def __call__(self, tables: dict, kappa: float, nanospec_point: dict | None) -> dict:
        """{name: (columns, rows)} tables -> {name: a figure with write_html / write_image} (the same names)."""


def write_outputs(out: Path, tables, figs, png=True) -> tuple:
    """CSV + HTML (+ PNG) per output (figs None: CSV only); returns ({file name: path}, PNG note or "")."""
    paths, note = {}, "" if png else "PNG skipped (png off)"
    if png and not importlib.util.find_spec("kaleido"):
        note = "PNG skipped: kaleido is not installed (pip install kaleido; it drives a Chrome/Chromium)"
    if figs is None:
        note = "figures skipped: no drawing function was given (python -m core bench --figures draws them)"
    for name, (cols, rows) in tables.items():
        runner.write_csv(out / f"{name}.csv", cols, rows)
        paths[f"{name}.csv"] = str(out / f"{name}.csv")
        if figs is None:
            continue
        figs[name].write_html(out / f"{name}.html", include_plotlyjs="directory")
        paths[f"{name}.html"] = str(out / f"{name}.html")
        if not note:
            note = write_png(figs[name], out / f"{name}.png")
            if not note:
                paths[f"{name}.png"] = str(out / f"{name}.png")
    return paths, note


def write_png(fig, path: Path) -> str:
    """"" when written, else why not (kaleido needs a browser; Debian's chromium works)."""
    try:
        fig.write_image(str(path), width=1000, height=fig.layout.height or 500)
        return ""
    except Exception as e:  # kaleido / browser missing or failing: the HTML and CSV still stand
        return f"PNG skipped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


class TqdmProgress:
    """progress(fraction, desc=...) as gradio's gr.Progress calls it, drawn with tqdm on stderr."""

    def __init__(self):
        from tqdm import tqdm
        self.bar = tqdm(total=1000, desc="paper", file=sys.stderr, bar_format="{l_bar}{bar}| {elapsed}<{remaining}")

    def __call__(self, fraction, desc=None):
        self.bar.n = int(1000 * fraction)
        if desc:
            self.bar.set_description(desc)
        self.bar.refresh()


def run_paper(args_or_settings, progress=None, pipe=None, draw: Draw | None = None) -> dict:
    """Run (or resume) the grid, write every table, figure and report.md; returns {file name: path}.
    args_or_settings: the runner's parsed arguments (runner.parse) or a dict (figures=DIR, prompts, limit, max_new_tokens,
    categories, model, draft, runtime, sweep_prompts, threads, seed, ...); pipe: a Pipeline to run on instead
    of the one the settings' model, draft and runtime load; draw: the figures of the tables (viz.paper.draw_figures,
    handed in by the command line and the app: core never imports viz)."""
    args = settings_from(args_or_settings)
    args.limit = DEFAULT_LIMIT if args.limit is None else args.limit
    runner.set_threads(args)
    out = Path(args.figures)
    prompts = runner.select_prompts(args)
    jobs = plan(args, prompts)
    pipe = pipe or runner.pipeline_from(args)
    base = runner.config_from(args, "nanospec")
    done = runner.open_out(out, {"model": pipe.model_id, "draft": pipe.draft_name, "runtime": pipe.runtime_name,
                                "base": base.to_dict()})
    progress = progress or TqdmProgress()
    t0 = time.perf_counter()
    run_grid(pipe, jobs, done, out / "runs.jsonl", progress)
    rows = [done[(p.id, v)] for p, v, _ in jobs]
    ids = {p.id for p in sweep_prompts(prompts, args.sweep_prompts)}
    gemm = gemm_vs_repack(pipe, rows, n=base.top_k)
    tables, kappa = make_tables(rows, pipe, base, ids, gemm)
    sweep_nano = _of(rows, "nanospec", ids)
    a = aggregate(sweep_nano) if sweep_nano else None
    point = {"active": a["mean_active_vocab"], "tokens_per_s": a["tokens_per_s"]} if a else None
    progress(1.0, desc="writing figures")
    figs = draw(tables, kappa, point) if draw else None
    paths, note = write_outputs(out, tables, figs, png=getattr(args, "png", True))
    meta = {"model": pipe.model_id, "draft": pipe.draft_name, "runtime": pipe.runtime_name, "prompts": len(prompts),
            "sweep_prompts": sorted(ids), "categories": sorted({p.category for p in prompts}), "runs": len(jobs),
            "max_new_tokens": base.max_new_tokens, "threads": _threads(), "png_note": note,
            "elapsed_s": round(time.perf_counter() - t0, 1), "grid_s": sum(r["wall_s"] for r in rows), "vocab_size": pipe.vocab_size, "kappa": kappa}
    (out / "report.md").write_text(report_text({k: r for k, (_, r) in tables.items()}, meta))
    paths["report.md"] = str(out / "report.md")
    return paths


def _threads() -> int:
    import torch
    return torch.get_num_threads()


def main(argv=None, draw: Draw | None = None) -> int:
    """python -m core bench --figures DIR: the paper experiments. The methods × prompts table is a benchmark, outside
    the product: `python -m bench methods` (bench/suites/methods.py), which the error names with these options."""
    args = runner.parse(argv)
    if not args.figures:
        import shlex
        raise SpecError("the methods × prompts table is a benchmark now: python -m bench methods "
                        + shlex.join(argv or []) + "  (python -m core bench draws the paper's figures: --figures DIR)")
    paths = run_paper(args, draw=draw)
    print("\n".join(f"wrote {p}" for p in paths.values()), file=sys.stderr)
    return 0
