"""Figure 6 (viz.paper.fig_vocab_evolution): |I_t| and cumulative coverage step by step."""
import statistics

from core.paper.grid import _of
from core.paper.numbers import span
from core.trace.stats import by_category

EVOLUTION_COLS = ["category", "step", "n_runs", "active_mean", "active_min", "active_max",
                  "coverage_mean", "coverage_min", "coverage_max"]


def evolution_table(rows) -> list:
    """Fig. 6: per category and decode step t, |I_t| and cumulative coverage (Σ covered / Σ emitted up
    to t) over the nanospec runs: mean, min, max across the runs still decoding at t."""
    out = []
    for cat, g in by_category(_of(rows, "nanospec")).items():
        series = [(r["trace"]["active"], _cumulative(r["trace"]["covered"], r["trace"]["emitted"])) for r in g]
        for t in range(max(len(a) for a, _ in series)):
            act = [a[t] for a, _ in series if t < len(a)]
            cov = [c[t] for _, c in series if t < len(c)]
            out.append({"category": cat, "step": t + 1, "n_runs": len(act),
                        "active_mean": round(statistics.fmean(act), 1), "active_min": min(act), "active_max": max(act),
                        "coverage_mean": round(statistics.fmean(cov), 4), "coverage_min": round(min(cov), 4),
                        "coverage_max": round(max(cov), 4)})
    return out


def _cumulative(covered, emitted) -> list:
    out, c, e = [], 0, 0
    for x, n in zip(covered, emitted):
        c, e = c + x, e + n
        out.append(c / max(e, 1))
    return out


def p_evolution(rows) -> str:
    head = "**fig6_vocab_evolution.** "
    if not rows:
        return head + "No NanoSpec runs in this selection."
    first = [r for r in rows if r["step"] == 1]
    last = {}
    for r in rows:
        last[r["category"]] = r
    return (head + f"|I_t| starts at {span([r['active_mean'] for r in first], '{:.0f}')} (prompt + prefill) and ends at "
            f"{span([r['active_mean'] for r in last.values()], '{:.0f}')} after {span([r['step'] for r in last.values()], '{:.0f}')} "
            f"steps; cumulative coverage ends at {span([r['coverage_mean'] for r in last.values()], '{:.1%}')}. "
            "|I_t| can only grow until S outgrows the W_max window; after that it tracks the recent context.")
