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
    fig = _base("Coverage of emitted tokens (cumulative)", "step", "coverage %")
    if any((r.get("stream") or {}).get("active") for r in steps):
        y = running_mean([[1 if v else 0 for v in r.get("emitted_in_vocab", [])] for r in steps])
        fig.add_trace(_line(x, y, "NanoSpec I_t", COLORS["nanospec"]))
    if fr_size and _has_fr(steps):
        fig.add_trace(_line(x, running_mean([_fr_flags(r, fr_size) for r in steps]), f"FR-Spec K={fr_size:,}",
                            COLORS["frspec_k"]))
    if _has_fr(steps) and any((r.get("stream") or {}).get("active") for r in steps):
        y = running_mean([_fr_flags(r, r["stream"]["active"]) for r in steps])
        fig.add_trace(_line(x, y, "FR-Spec K=|I_t|", COLORS["frspec_it"], dash="dot"))
    fig.add_trace(_line(x, [100.0] * len(x), "full vocab", COLORS["full"], dash="dash"))
    fig.update_yaxes(range=[0, 104])
    return _mark(fig, step)


def active_vocab_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "ar"]
    x = [r["step"] for r in steps]
    fig = _base("Active vocabulary |I_t| per step", "step", "tokens")
    fig.add_trace(_line(x, [(r.get("stream") or {}).get("active", 0) for r in steps], "|I_t|", COLORS["active"]))
    fig.add_trace(_line(x, [(r.get("stream") or {}).get("size_s", 0) for r in steps], "|S|", COLORS["size_s"],
                        dash="dot"))
    return _mark(fig, step)


def accept_len_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "prefill"]
    x = [r["step"] for r in steps]
    y = [len(r.get("emitted", [])) for r in steps]
    fig = _base("Acceptance length per step (accepted + 1)", "step", "tokens")
    fig.add_trace(go.Bar(x=x, y=y, name="tokens this step", marker_color=COLORS["accept"], opacity=0.75))
    means = [sum(y[: i + 1]) / (i + 1) for i in range(len(y))]
    fig.add_trace(_line(x, means, "running mean", COLORS["mean"]))
    return _mark(fig, step)


def timing_fig(records: list, step: int | None = None) -> go.Figure:
    steps = [r for r in records if r.get("kind") != "prefill"]
    x = [r["step"] for r in steps]
    fig = _base("Time per step (ms)", "step", "ms")
    for k, color in TIMER_COLORS.items():
        fig.add_trace(go.Bar(x=x, y=[(r.get("timing_ms") or {}).get(k, 0.0) for r in steps],
                             name=k.replace("_", " "), marker_color=color))
    fig.update_layout(barmode="stack")
    return _mark(fig, step)


def compare_coverage_fig(runs: dict) -> go.Figure:
    """One cumulative-coverage line per method: runs = {method: [record dicts]}."""
    fig = _base("Coverage by method (cumulative)", "step", "coverage %")
    for method, records in runs.items():
        steps = [r for r in records if r.get("kind") in ("step", "ar")]
        y = running_mean([[_in_vocab_or_full(method, v) for v in r.get("emitted_in_vocab", []) or
                           [True] * len(r.get("emitted", []))] for r in steps])
        fig.add_trace(_line([r["step"] for r in steps], y, method, METHOD_COLORS.get(method, "#000")))
    fig.update_yaxes(range=[0, 104])
    return fig


def figures_html(figs: list, title: str = "SpecLens plots") -> str:
    """All figures in one standalone HTML page (plotly.js from the CDN) for download."""
    body = "".join(f.to_html(full_html=False, include_plotlyjs=("cdn" if i == 0 else False)) for i, f in enumerate(figs))
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>{body}</body></html>"


def _in_vocab_or_full(method, v):
    if method in ("ar", "full", "slimspec"):
        return 1
    return None if v is None else (1 if v else 0)


def _has_fr(steps) -> bool:
    return any(v is not None for r in steps for v in r.get("emitted_fr_rank", []) or [])


def _fr_flags(r, k) -> list:
    return [None if rank is None else (1 if rank < k else 0) for rank in r.get("emitted_fr_rank", []) or []]


def _line(x, y, name, color, dash=None) -> go.Scatter:
    return go.Scatter(x=x, y=y, name=name, mode="lines+markers", marker={"size": 4},
                      line={"color": color, "width": 2, "dash": dash})


def _base(title, xt, yt) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title, "font": {"size": 14}, "x": 0.01}, template="plotly_white", height=280,
                      margin={"l": 48, "r": 12, "t": 40, "b": 36}, xaxis_title=xt, yaxis_title=yt,
                      legend={"orientation": "h", "y": -0.25, "x": 0}, hovermode="x unified")
    return fig


def _mark(fig: go.Figure, step) -> go.Figure:
    if step is not None:
        fig.add_vline(x=step, line_width=1, line_dash="dot", line_color="#888")
    return fig
