"""Results as data: the benchmarks append one row per measurement to results/results.jsonl (`--record`:
append_row), and `python -m bench render-readme` rewrites README.md's results table (between the
`<!-- results:start -->` and `<!-- results:end -->` markers) from it; tests/test_results.py checks they agree.

A row: date, commit, cpu_model, cpu_features (the /proc/cpuinfo flags the kernels dispatch on), isa_cap
(SPECLENS_CPU_ISA, "" none), cpu_class (core.results.cpu_class: amx | avx512 | avx2 | other), cpu_label, threads,
model (alias), model_label, draft, kind, command, figures, and for rows taken from the log, log (its entry). Kinds:
    plain        figures: ours_tok_s, llamacpp_tok_s (decode tok/s at the same depth), whole_runs_x (optional)
    speculation  figures: best_spec_x (and best_spec_x_high for a range), best_spec_label, phase (whole | generation)
    runtime      figures: <runner>_tok_s of `python -m bench runtime`'s greedy decoding
The table: one line per (model, CPU class), its newest plain row beside its newest speculation row of each label.
"""
import argparse
import datetime
import json
import shlex
import subprocess

from core.paths import ROOT, write_atomic
from core.results import CLASS_LABELS, RESULTS, read_rows, this_cpu

README = ROOT / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
REQUIRED = ("date", "commit", "cpu_model", "cpu_features", "cpu_class", "threads", "model", "kind", "command", "figures")
KINDS = ("plain", "speculation", "runtime")
HEADER = ("| model | CPU class | plain decoding: ours ÷ llama.cpp | best speculation × our plain decoding | measured |\n"
          "|---|---|---|---|---|")


def commit() -> str:
    """This checkout's commit (7 hex digits; +dirty with uncommitted changes), "" outside git."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty=+dirty", "--abbrev=7"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() if out.returncode == 0 else ""
    except OSError:
        return ""


NAMES = {"smollm2-135m-instruct": "SmolLM2-135M", "qwen2.5-coder-0.5b-instruct": "Qwen2.5-Coder-0.5B",
         "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B", "gemma-3-270m": "Gemma-3-270m"}


def model_label(model: str, draft: str | None) -> str:
    """The table's name of a target and its draft: "SmolLM2-135M + EAGLE", "Qwen2.5-Coder-1.5B ← 0.5B"."""
    name = NAMES.get(model, model)
    if draft == "eagle":
        return f"{name} + EAGLE"
    return f"{name} ← {NAMES[draft].rsplit('-', 1)[-1]}" if draft in NAMES else name


def append_row(kind: str, model: str, figures: dict, command: str, argv=None, threads: int | None = None,
               draft: str | None = None, path=RESULTS, **extra) -> dict:
    """Append one measurement, on this machine now, to the results file; returns the row."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: use {', '.join(KINDS)}")
    cpu = this_cpu()
    cap = f" (SPECLENS_CPU_ISA={cpu['isa_cap']})" if cpu["isa_cap"] else ""
    row = {"date": datetime.date.today().isoformat(), "commit": commit(), **cpu,
           "cpu_label": f"{cpu['cpu_model'] or 'CPU'}, {CLASS_LABELS[cpu['cpu_class']]}{cap}",
           "threads": threads, "model": model, "model_label": model_label(model, draft), "draft": draft, "kind": kind,
           "command": command + (" " + shlex.join(argv) if argv else ""), "figures": figures, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return row


# ---------------------------------------------------------------- the README's table

def x(v: float) -> str:
    return f"{v:.2f}"


def plain_cell(r: dict | None) -> str:
    if r is None:
        return "not measured"
    f = r["figures"]
    whole = f"; whole runs {x(f['whole_runs_x'])}×" if f.get("whole_runs_x") else ""
    return f"**{x(f['ours_tok_s'] / f['llamacpp_tok_s'])}×** ({f['ours_tok_s']} / {f['llamacpp_tok_s']} tok/s{whole})"


def spec_cell(rows: list, plain: dict | None) -> str:
    cells = []
    for r in rows:
        f = r["figures"]
        span = x(f["best_spec_x"]) + (f"–{x(f['best_spec_x_high'])}" if f.get("best_spec_x_high") else "")
        notes = [f["best_spec_label"]] + (["the generation phase"] if f.get("phase") == "generation" else [])
        notes += [r["cpu_model"]] if plain and r["cpu_model"] != plain["cpu_model"] else []
        cells.append(f"{span}× ({', '.join(notes)})")
    return "; ".join(cells) or "not measured"


def newest(rows: list) -> list:
    """rows ordered by date, file order within a date (the last is the newest)."""
    return sorted(rows, key=lambda r: r["date"])


def table(rows: list) -> str:
    """The README's results table from the plain and speculation rows."""
    groups = {}
    for r in rows:
        if r["kind"] in ("plain", "speculation"):
            groups.setdefault((r["model"], r["cpu_class"]), []).append(r)
    lines = [HEADER]
    for g in groups.values():
        plains = newest([r for r in g if r["kind"] == "plain"])
        plain = plains[-1] if plains else None
        specs = {}
        for r in newest([r for r in g if r["kind"] == "speculation"]):
            specs[(r["figures"]["best_spec_label"], r["figures"].get("phase", "whole"))] = r
        label = next((r["model_label"] for r in sorted(g, key=lambda r: r["kind"] != "speculation")
                      if r.get("model_label")), g[0]["model"])
        dates = list(dict.fromkeys(r["date"] for r in [*([plain] if plain else []), *specs.values()]))
        lines.append(f"| {label} | {(plain or g[0])['cpu_label']} | {plain_cell(plain)} | "
                     f"{spec_cell(list(specs.values()), plain)} | {'; '.join(dates)} |")
    return "\n".join(lines)


def rendered(text: str, rows: list) -> str:
    """README text with the table between the markers rendered from rows."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(rows)}\n{END}{tail}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench render-readme", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if README.md's table is not the rendering (no write)")
    args = p.parse_args(argv)
    text = README.read_text()
    new = rendered(text, read_rows())
    if args.check:
        print("README.md's results table is " + ("up to date" if new == text else "stale: run python -m bench render-readme"))
        return 0 if new == text else 1
    if new != text:
        write_atomic(README, new)
    print(f"README.md's results table: {len(read_rows())} rows of results/results.jsonl" + ("" if new != text else ", unchanged"))
    return 0
