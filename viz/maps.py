"""The token-map doctor's report (core.maps.check.report dicts) as HTML, and coverage per category
(core.maps.compare.coverage_rows) as a grouped bar chart. Plain dicts and lists in, no model code."""
from viz.plots import _figure
from viz.tokens import esc

STATUS = {"ok": ("badge-ok", "OK: no findings"), "warning": ("badge-warn", "serves, with warnings"),
          "error": ("badge-bad", "errors: do not serve as is")}
STYLE = ("<style>.maps-report{margin:6px 0 12px}.maps-findings{border-collapse:collapse;width:100%;margin-top:6px}"
         ".maps-findings td,.maps-findings th{border-bottom:1px solid #e8eaed;padding:4px 8px;text-align:left;"
         "vertical-align:top}.finding-error .sev{color:#c5221f;font-weight:600}.finding-warning .sev{color:#b06000;"
         "font-weight:600}</style>")
BAR_COLORS = ["#1a73e8", "#e8710a", "#0f9d58", "#a142f4", "#5f6368", "#f28b82"]


def finding_row(x: dict) -> str:
    return (f'<tr class="finding finding-{esc(x["severity"])}" data-code="{esc(x["code"])}">'
            f'<td class="sev">{esc(x["severity"])}</td><td><code>{esc(x["code"])}</code></td>'
            f'<td>{esc(x["message"])}</td></tr>')


def report_html(rep: dict) -> str:
    """One file's report: status badge, what was read, each finding (severity, code, message)."""
    badge, words = STATUS[rep["status"]]
    size = f'{rep["size"]:,} ids' if rep.get("size") is not None else "no ids read"
    head = (f'<div class="maps-head"><b>{esc(rep["file"])}</b> · {esc(rep.get("format") or "unread")} · {esc(size)} · '
            f'model {esc(rep["model"])} (V = {rep["vocab_size"]:,}) <span class="badge {badge}" '
            f'data-status="{esc(rep["status"])}">{esc(words)}</span></div>')
    if not rep["findings"]:
        return f'{STYLE}<div class="speclens maps-report">{head}<p>Every check passed.</p></div>'
    rows = "".join(finding_row(x) for x in rep["findings"])
    return (f'{STYLE}<div class="speclens maps-report">{head}<table class="maps-findings"><tr><th>severity</th>'
            f'<th>finding</th><th>what it means</th></tr>{rows}</table></div>')


def coverage_fig(rows: list, title: str = "Coverage per category"):
    """Grouped bars: x = category (then "all"), one bar per map column, y = % of tokens in the map."""
    cats = [r["category"] for r in rows]
    names = list(rows[0]["coverage"]) if rows else []
    traces = [{"type": "bar", "x": cats, "y": [100 * r["coverage"][n] for r in rows], "name": n,
               "marker": {"color": BAR_COLORS[i % len(BAR_COLORS)]},
               "hovertemplate": "%{x}: %{y:.1f}%<extra>" + esc(n) + "</extra>"} for i, n in enumerate(names)]
    fig = _figure(title, "prompt category", "coverage %", traces, None, yrange=[0, 104], barmode="group")
    fig.update_layout(height=340, hovermode="closest")
    return fig
