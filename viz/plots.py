"""Plotly figures from trace record dicts: coverage, |I_t|, acceptance length, time split, method comparison."""
import plotly.graph_objects as go

COLORS = {"nanospec": "#0f9d58", "frspec_k": "#e8710a", "frspec_it": "#a142f4", "full": "#5f6368",
          "active": "#1a73e8", "size_s": "#9aa0a6", "accept": "#0f9d58", "mean": "#202124"}
TIMER_COLORS = {"draft_backbone": "#8ab4f8", "lm_head": "#f28b82", "gather": "#fdd663", "verify": "#81c995",
                "other": "#c6c6c6"}
METHOD_COLORS = {"ar": "#5f6368", "full": "#202124", "frspec": "#e8710a", "nanospec": "#0f9d58",
                 "slimspec": "#1a73e8", "nanoslim": "#a142f4"}


def spec_steps(records: list) -> list:
    return [r for r in records if r.get("kind") == "step"]


def running_mean(flags_per_step: list) -> list:
    """Cumulative coverage after each step, from per-step lists of 0/1 flags (None entries skipped)."""
    out, hit, tot = [], 0, 0
    for flags in flags_per_step:
        vals = [f for f in flags if f is not None]
        hit, tot = hit + sum(vals), tot + len(vals)
        out.append(100.0 * hit / tot if tot else None)
    return out


def coverage_fig(records: list, fr_size: int | None = None, step: int | None = None) -> go.Figure:
    """Cumulative share of emitted tokens inside each method's vocabulary, step by step."""
    steps = spec_steps(records)
    x = [r["step"] for r in steps]
    dynamic = any((r.get("stream") or {}).get("active") for r in steps)
    traces = []
    if dynamic:
        y = running_mean([[1 if v else 0 for v in r.get("emitted_in_vocab", [])] for r in steps])
        traces.append(_line(x, y, "NanoSpec I_t", COLORS["nanospec"]))
    if fr_size and _has_fr(steps):
        traces.append(_line(x, running_mean([_fr_flags(r, fr_size) for r in steps]), f"FR-Spec K={fr_size:,}",
                            COLORS["frspec_k"]))
    if dynamic and _has_fr(steps):
        y = running_mean([_fr_flags(r, r["stream"]["active"]) for r in steps])
        traces.append(_line(x, y, "FR-Spec K=|I_t|", COLORS["frspec_it"], dash="dot"))
    traces.append(_line(x, [100.0] * len(x), "full vocab", COLORS["full"], dash="dash"))
    return _figure("Coverage of emitted tokens (cumulative)", "step", "coverage %", traces, step, yrange=[0, 104])


def active_vocab_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "ar"]
    x = [r["step"] for r in steps]
    traces = [_line(x, [(r.get("stream") or {}).get("active", 0) for r in steps], "|I_t|", COLORS["active"]),
              _line(x, [(r.get("stream") or {}).get("size_s", 0) for r in steps], "|S|", COLORS["size_s"], dash="dot")]
    return _figure("Active vocabulary |I_t| per step", "step", "tokens", traces, step)


def accept_len_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "prefill"]
    x = [r["step"] for r in steps]
    y = [len(r.get("emitted", [])) for r in steps]
    means = [sum(y[: i + 1]) / (i + 1) for i in range(len(y))]
    traces = [{"type": "bar", "x": x, "y": y, "name": "tokens this step", "marker": {"color": COLORS["accept"]},
               "opacity": 0.75}, _line(x, means, "running mean", COLORS["mean"])]
    return _figure("Acceptance length per step (accepted + 1)", "step", "tokens", traces, step)


def timing_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "prefill"]
    x = [r["step"] for r in steps]
    traces = [{"type": "bar", "x": x, "y": [(r.get("timing_ms") or {}).get(k, 0.0) for r in steps],
               "name": k.replace("_", " "), "marker": {"color": color}} for k, color in TIMER_COLORS.items()]
    return _figure("Time per step (ms)", "step", "ms", traces, step, barmode="stack")


def compare_coverage_fig(runs: dict) -> go.Figure:
    """One cumulative-coverage line per method against tokens generated (steps differ between methods)."""
    traces = []
    for method, records in runs.items():
        steps = [r for r in records if r.get("kind") in ("step", "ar")]
        y = running_mean([[_in_vocab_or_full(method, v) for v in r.get("emitted_in_vocab", []) or
                           [True] * len(r.get("emitted", []))] for r in steps])
        x = _cumsum([len(r.get("emitted", [])) for r in steps])
        traces.append(_line(x, y, method, METHOD_COLORS.get(method, "#000")))
    return _figure("Coverage by method (cumulative)", "tokens generated", "coverage %", traces, None,
                   yrange=[0, 104])


def _cumsum(xs) -> list:
    out, tot = [], 0
    for v in xs:
        tot += v
        out.append(tot)
    return out


def figures_html(figs: list, title: str = "SpecLens plots") -> str:
    """All figures in one standalone HTML page (plotly.js from the CDN) for download."""
    body = "".join(f.to_html(full_html=False, include_plotlyjs=("cdn" if i == 0 else False)) for i, f in enumerate(figs))
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{body}</body></html>"


def _in_vocab_or_full(method, v):
    if method in ("ar", "full", "slimspec"):
        return 1
    return None if v is None else (1 if v else 0)


def _has_fr(steps) -> bool:
    """Frequency ranks are known (the engine writes -1 when there is no FR-Spec table)."""
    return any(v is not None and v >= 0 for r in steps for v in r.get("emitted_fr_rank", []) or [])


def _fr_flags(r, k) -> list:
    return [None if rank is None or rank < 0 else (1 if rank < k else 0) for rank in r.get("emitted_fr_rank", []) or []]


def _line(x, y, name, color, dash=None) -> dict:
    return {"type": "scatter", "x": x, "y": y, "name": name, "mode": "lines+markers", "marker": {"size": 4},
            "line": {"color": color, "width": 2, "dash": dash}}


def _figure(title, xt, yt, traces, step, yrange=None, barmode=None) -> go.Figure:
    """One go.Figure built from plain dicts, no template: ~10x cheaper than update_layout + plotly_white."""
    axis = {"gridcolor": "#e8eaed", "zerolinecolor": "#dadce0", "linecolor": "#dadce0", "automargin": True}
    layout = {"title": {"text": title, "font": {"size": 14}, "x": 0.01}, "template": None, "height": 280,
              "margin": {"l": 48, "r": 12, "t": 40, "b": 40}, "paper_bgcolor": "white", "plot_bgcolor": "white",
              "font": {"family": "system-ui, sans-serif", "size": 12, "color": "#3c4043"},
              "xaxis": {**axis, "title": {"text": xt}, "title_standoff": 2}, "yaxis": {**axis, "title": {"text": yt}, "range": yrange},
              "legend": {"orientation": "h", "y": -0.3, "x": 0, "yanchor": "top"}, "hovermode": "x unified", "barmode": barmode}
    if step is not None:
        layout["shapes"] = [{"type": "line", "x0": step, "x1": step, "y0": 0, "y1": 1, "yref": "paper",
                             "line": {"width": 1, "dash": "dot", "color": "#888"}}]
    return go.Figure({"data": traces, "layout": layout})
