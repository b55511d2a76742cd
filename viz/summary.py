"""Run summary cards (from core.trace.summarize()'s dict) and the method-comparison table."""
from viz.tokens import esc


def lm_head_share(summary: dict) -> float | None:
    """LM-head time as a share of all drafting time (backbone + head + gather)."""
    t = summary.get("timing_ms") or {}
    draft = t.get("draft_backbone", 0.0) + t.get("lm_head", 0.0) + t.get("gather", 0.0)
    return t.get("lm_head", 0.0) / draft if draft > 0 else None


def speedup(summary: dict, baseline: dict | None) -> float | None:
    if not baseline or not baseline.get("tokens_per_s") or not summary.get("tokens_per_s"):
        return None
    return summary["tokens_per_s"] / baseline["tokens_per_s"]


def summary_cards(summary: dict, method: str = "", baseline: dict | None = None, lossless: dict | None = None,
                  runtime: str = "") -> str:
    if not summary:
        return '<div class="speclens summary-panel summary-empty">Run a prompt to see tokens/s, acceptance and coverage.</div>'
    share, sp = lm_head_share(summary), speedup(summary, baseline)
    cards = [("tokens/s", f"{summary.get('tokens_per_s', 0):.1f}", "new tokens per second of wall time"),
             ("mean acceptance", f"{summary.get('mean_accept_len', 0):.2f}", "tokens emitted per target pass (τ)"),
             ("mean |I_t|", _int(summary.get("mean_active_vocab")), "size of the active draft vocabulary"),
             ("coverage", _coverage(summary, method), "emitted tokens inside the draft vocabulary"),
             ("LM-head share", "—" if share is None else f"{100 * share:.0f}%", "LM head / all drafting time"),
             ("speedup vs AR", "—" if sp is None else f"{sp:.2f}×",
              "needs a plain-decoding (ar) run of the same prompt" if sp is None else "tokens/s ÷ plain decoding tokens/s")]
    html = "".join(f'<div class="card" title="{esc(h)}"><div class="card-v">{esc(v)}</div>'
                   f'<div class="card-k">{esc(k)}</div></div>' for k, v, h in cards)
    return (f'<div class="speclens summary-panel"><div class="cards">{html}</div>'
            f'{_footer(summary, method, lossless, runtime)}</div>')


def _footer(summary, method, lossless, runtime="") -> str:
    bits = [f"<b>{esc(method)}</b>" if method else "", f"{summary.get('new_tokens', 0)} tokens",
            f"{summary.get('steps', 0)} steps", _cut(summary.get("cut", "")),
            f'<span class="runtime">runtime: {esc(runtime)}</span>' if runtime else ""]
    if lossless is not None:
        bits.append(lossless_badge(lossless))
    return '<div class="summary-footer">' + " · ".join(b for b in bits if b) + "</div>"


def lossless_badge(verdict: dict) -> str:
    """verdict: core.trace.compare_to_ar's dict (the CLI's identical_to_ar / first_diff / near_tie)."""
    i = verdict.get("first_diff")
    if verdict.get("identical") and verdict.get("tie"):
        return (f'<span class="badge badge-ok" title="same tokens as plain decoding up to token {i}, where the '
                f'target\'s top-2 logits tie within rounding">lossless ✓ (near-tie at token {i})</span>')
    if verdict.get("identical"):
        return '<span class="badge badge-ok" title="same tokens as plain decoding">lossless ✓</span>'
    return (f'<span class="badge badge-bad" title="output differs from plain decoding from token {i} on">'
            f'differs from AR at token {i} ✗</span>')


def _cut(cut: str) -> str:
    return f'<span class="badge badge-warn">stopped: {esc(cut)}</span>' if cut else ""


def _int(v) -> str:
    """Counts; 0 means "not measured" here (no dynamic vocabulary), shown as a dash."""
    return "—" if not v else f"{v:,.0f}"


def _coverage(s: dict, method: str) -> str:
    return "—" if method == "ar" or not s.get("steps") else f"{100 * s.get('coverage', 0):.1f}%"


def compare_table(rows: list) -> str:
    """rows: [{"method", "summary", "speedup", "lossless"}] -> an HTML table."""
    head = ("<tr><th>method</th><th>tokens/s</th><th>speedup</th><th>accept len</th><th>mean |I_t|</th>"
            "<th>coverage</th><th>LM-head share</th><th>lossless</th></tr>")
    body = "".join(_compare_row(r) for r in rows)
    return f'<div class="speclens compare-table"><table>{head}{body}</table></div>'


def _compare_row(r) -> str:
    if r.get("error"):
        return f'<tr><td><b>{esc(r["method"])}</b></td><td colspan="7" class="row-error">⚠ {esc(r["error"])}</td></tr>'
    s = r["summary"]
    share = lm_head_share(s)
    sp = r.get("speedup")
    ll = r.get("lossless")
    cells = [f"<b>{esc(r['method'])}</b>", f"{s.get('tokens_per_s', 0):.1f}", "—" if sp is None else f"{sp:.2f}×",
             f"{s.get('mean_accept_len', 0):.2f}", _int(s.get("mean_active_vocab")),
             _coverage(s, r["method"]), "—" if share is None else f"{100 * share:.0f}%",
             "—" if ll is None else lossless_badge(ll)]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
