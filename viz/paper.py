"""Plotly figures for the paper experiments, from plain rows (lists of dicts) made by core/paper/.

No torch, no model code: every function takes the rows of one CSV and returns a go.Figure.
"""
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from viz.plots import METHOD_COLORS
PALETTE = ("#0f9d58", "#1a73e8", "#a142f4", "#f9ab00", "#d93025", "#12b5cb", "#6b7280", "#111827")


def _layout(fig, title, **kw):
    fig.update_layout(title=title, template="plotly_white", height=kw.pop("height", 460),
                      margin={"l": 60, "r": 20, "t": 60, "b": 50}, legend={"font": {"size": 11}}, **kw)
    return fig


def _rgba(hex_color, alpha):
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def fig_oracle_vs_actual(rows, nanospec=None):
    """NanoSpec Fig. 1a: speed vs static vocabulary size V′, measured (FR-Spec) against the oracle
    ᾱ_full / (T_verify + T_draft(V′)). nanospec: optional {"active": mean |I_t|, "tokens_per_s": ...}."""
    rows = sorted(rows, key=lambda r: r["vocab_size"])
    x = [r["vocab_size"] for r in rows]
    fig = go.Figure([go.Scatter(x=x, y=[r["actual_tps"] for r in rows], name="actual (FR-Spec)", mode="lines+markers",
                                line={"color": METHOD_COLORS["frspec"]}),
                     go.Scatter(x=x, y=[r["oracle_tps"] for r in rows], name="oracle ᾱ_full / (T_verify + T_draft(V′))",
                                mode="lines+markers", line={"color": "#111827", "dash": "dash"})])
    if nanospec:
        fig.add_trace(go.Scatter(x=[nanospec["active"]], y=[nanospec["tokens_per_s"]], name="NanoSpec (mean |I_t|)",
                                 mode="markers", marker={"size": 12, "symbol": "star", "color": METHOD_COLORS["nanospec"]}))
    fig.update_xaxes(type="log", title="draft vocabulary size V′")
    fig.update_yaxes(title="tokens / s")
    return _layout(fig, "Speed vs draft vocabulary size: actual vs oracle")


def fig_coverage_vs_vocab(rows):
    """NanoSpec Fig. 1b: per category, coverage of the generated tokens by the K most frequent ids
    (FR-Spec curve) and NanoSpec's coverage at its mean |I_t| (one point)."""
    fig = go.Figure()
    for i, cat in enumerate(dict.fromkeys(r["category"] for r in rows)):
        color = PALETTE[i % len(PALETTE)]
        curve = sorted((r for r in rows if r["category"] == cat and r["kind"] == "frspec"), key=lambda r: r["vocab_size"])
        point = [r for r in rows if r["category"] == cat and r["kind"] == "nanospec"]
        fig.add_trace(go.Scatter(x=[r["vocab_size"] for r in curve], y=[r["coverage"] for r in curve], mode="lines",
                                 name=f"FR-Spec · {cat}", legendgroup=cat, line={"color": color}))
        fig.add_trace(go.Scatter(x=[r["vocab_size"] for r in point], y=[r["coverage"] for r in point], mode="markers",
                                 name=f"NanoSpec · {cat}", legendgroup=cat,
                                 marker={"color": color, "size": 11, "symbol": "star"}))
    fig.update_xaxes(type="log", title="vocabulary size (static top-K, or NanoSpec's mean |I_t|)")
    fig.update_yaxes(title="coverage of generated tokens", range=[0, 1.02])
    return _layout(fig, "Ground-truth coverage vs vocabulary size")


def fig_wmax_sensitivity(rows):
    """NanoSpec Fig. 5: acceptance length and speed vs W_max."""
    rows = sorted(rows, key=lambda r: r["w_max"])
    x = [r["w_max"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("acceptance length τ", "tokens / s"))
    fig.add_trace(go.Scatter(x=x, y=[r["mean_accept_len"] for r in rows], name="acceptance length",
                             mode="lines+markers", line={"color": METHOD_COLORS["nanospec"]}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["tokens_per_s"] for r in rows], name="tokens/s",
                             mode="lines+markers", line={"color": "#111827"}), row=1, col=2)
    fig.update_xaxes(type="log", title="W_max")
    return _layout(fig, "NanoSpec sensitivity to the window W_max")


def fig_vocab_evolution(rows):
    """NanoSpec Fig. 6: per category, |I_t| and cumulative coverage vs decode step (mean line, min–max band)."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=("|I_t|", "cumulative coverage"))
    for i, cat in enumerate(dict.fromkeys(r["category"] for r in rows)):
        color = PALETTE[i % len(PALETTE)]
        g = sorted((r for r in rows if r["category"] == cat), key=lambda r: r["step"])
        x = [r["step"] for r in g]
        for row, key in ((1, "active"), (2, "coverage")):
            band_y = [r[key + "_max"] for r in g] + [r[key + "_min"] for r in reversed(g)]
            fig.add_trace(go.Scatter(x=x + x[::-1], y=band_y, mode="lines", fill="toself", fillcolor=_rgba(color, 0.15),
                                     line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=cat,
                                     name=f"{cat} min–max"), row=row, col=1)
            fig.add_trace(go.Scatter(x=x, y=[r[key + "_mean"] for r in g], mode="lines", line={"color": color},
                                     name=cat, legendgroup=cat, showlegend=row == 1), row=row, col=1)
    fig.update_xaxes(title="decode step", row=2, col=1)
    return _layout(fig, "Active vocabulary and coverage over decoding", height=620)


def fig_speed_table(rows):
    """Table 2: speedup over AR per category and method (grouped bars); hover shows tokens/s and τ."""
    fig = go.Figure()
    for method in dict.fromkeys(r["method"] for r in rows):
        g = [r for r in rows if r["method"] == method]
        fig.add_trace(go.Bar(x=[r["category"] for r in g], y=[r["speedup_vs_ar"] for r in g], name=method,
                             marker_color=METHOD_COLORS.get(method),
                             customdata=[[r["tokens_per_s"], r["mean_accept_len"]] for r in g],
                             hovertemplate="%{x}: %{y:.2f}× (%{customdata[0]:.1f} tok/s, τ=%{customdata[1]:.2f})"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#6b7280")
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="speedup vs AR")
    return _layout(fig, "Speed per category and method")


def fig_latency_table(rows):
    """Table 4: per draft step (one LM-head call) latency split, stacked per method."""
    fig = go.Figure()
    for key, color in (("backbone_ms", "#1a73e8"), ("gather_ms", "#f9ab00"), ("lm_head_ms", "#d93025")):
        fig.add_trace(go.Bar(x=[r["method"] for r in rows], y=[r[key] for r in rows], name=key[:-3], marker_color=color))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="ms per draft step")
    return _layout(fig, "Draft-step latency split")


def fig_table(rows, cols, title):
    """Any table as a Plotly table (the ablation and source tables)."""
    cells = [[_cell(r.get(c, "")) for r in rows] for c in cols]
    fig = go.Figure(go.Table(header={"values": list(cols), "align": "left"}, cells={"values": cells, "align": "left"}))
    return _layout(fig, title, height=120 + 30 * max(len(rows), 1))


def _cell(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def iso_speedup_rho(nu, speedup, kappa):
    """ρ_τ on the iso-speedup curve S = ρ_τ(1+κ)/(1+νκ):  ρ_τ = S(1+νκ)/(1+κ)."""
    return speedup * (1 + nu * kappa) / (1 + kappa)


def fig_nu_rho(rows, kappa, levels=(0.8, 0.9, 1.0, 1.1, 1.2, 1.3)):
    """SlimSpec's (ν, ρ_τ) plane: each method as a point, iso-speedup curves for the measured κ;
    right: predicted ρ_τ(1+κ)/(1+νκ) against the measured speedup over Full."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=(f"(ν, ρ_τ) plane, κ = {kappa:.3g}",
                                                        "predicted vs measured speedup over Full"))
    nus = [i / 50 for i in range(0, 76)]
    for s in levels:
        fig.add_trace(go.Scatter(x=nus, y=[iso_speedup_rho(n, s, kappa) for n in nus], mode="lines",
                                 line={"color": "#9ca3af", "dash": "dot", "width": 1}, name=f"speedup {s:g}×",
                                 legendgroup="iso", showlegend=s == levels[0], hoverinfo="name"), row=1, col=1)
    for r in rows:
        color = METHOD_COLORS.get(r["method"], "#111827")
        fig.add_trace(go.Scatter(x=[r["nu"]], y=[r["rho"]], mode="markers+text", text=[r["method"]],
                                 textposition="top center", marker={"size": 11, "color": color}, name=r["method"],
                                 legendgroup=r["method"]), row=1, col=1)
        fig.add_trace(go.Scatter(x=[r["predicted"]], y=[r["measured"]], mode="markers", marker={"size": 11, "color": color},
                                 name=r["method"], legendgroup=r["method"], showlegend=False), row=1, col=2)
    vals = [v for r in rows for v in (r["predicted"], r["measured"])] or [1.0]
    lo, hi = min(vals + [1.0]) * 0.95, max(vals + [1.0]) * 1.05
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "#6b7280", "dash": "dash"},
                             name="y = x"), row=1, col=2)
    fig.update_xaxes(title="ν = head time method / Full", row=1, col=1)
    fig.update_yaxes(title="ρ_τ = τ method / Full", row=1, col=1)
    fig.update_xaxes(title="predicted ρ_τ(1+κ)/(1+νκ)", row=1, col=2)
    fig.update_yaxes(title="measured tokens/s ratio", row=1, col=2)
    return _layout(fig, "SlimSpec ν–ρ–κ: where each draft head sits", height=500)


def draw_figures(tables: dict, kappa: float, nanospec_point=None) -> dict:
    """Every paper output drawn: {name: (columns, rows)} -> {name: figure} (core.paper's tables)."""
    t = {name: rows for name, (_, rows) in tables.items()}
    cols = {name: c for name, (c, _) in tables.items()}
    return {"fig1a_oracle_vs_actual": fig_oracle_vs_actual(t["fig1a_oracle_vs_actual"], nanospec_point),
            "fig1b_coverage_vs_vocab": fig_coverage_vs_vocab(t["fig1b_coverage_vs_vocab"]),
            "fig5_wmax_sensitivity": fig_wmax_sensitivity(t["fig5_wmax_sensitivity"]),
            "fig6_vocab_evolution": fig_vocab_evolution(t["fig6_vocab_evolution"]),
            "table2_speed": fig_speed_table([r for r in t["table2_speed"] if r["method"] != "ar"]),
            "table4_latency": fig_latency_table(t["table4_latency"]),
            "table5_ablation": fig_table(t["table5_ablation"], cols["table5_ablation"], "Stream sources and LM-head layout"),
            "table8_sources": fig_table(t["table8_sources"], cols["table8_sources"],
                                        "Where the ids entering I_t come from (shares)"),
            "slimspec_nu_rho": fig_nu_rho(t["slimspec_nu_rho"], kappa)}
