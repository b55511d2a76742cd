"""Every Run-tab panel for one replay position, as plain values (HTML strings, Plotly figures)."""
from viz import plots
from viz.stream import render_stream
from viz.text import render_text
from viz.tokens import records_upto
from viz.tree import render_tree

PANELS = ("text", "stream", "tree", "coverage", "active", "accept", "timing")


def render_panels(trace: dict, step: int | None = None, with_plots: bool = True) -> dict:
    """{panel name: value}; step None = the end of the run (no replay marker)."""
    out = {"text": render_text(trace, step), "stream": render_stream(trace, step), "tree": render_tree(trace, step)}
    if with_plots:
        out.update(render_plots(trace, step))
    return out


def render_plots(trace: dict, step: int | None = None) -> dict:
    recs = records_upto(trace, step)
    fr = (trace.get("meta", {}).get("cfg") or {}).get("fr_size")
    return {"coverage": plots.coverage_fig(recs, fr, step), "active": plots.active_vocab_fig(recs, step),
            "accept": plots.accept_len_fig(recs, step), "timing": plots.timing_fig(recs, step)}


def all_figures(trace: dict) -> list:
    return list(render_plots(trace, None).values())
