"""Run summary cards (from core.trace.stats.summarize()'s dict) and the method-comparison table."""
import re

from viz.text import node_origin, rejected_nodes
from viz.tokens import esc


def vocab_misses(records: list) -> tuple:
    """(vocabulary misses, corrections): a correction is a step's target token where drafts were rejected;
    a vocabulary miss is one outside the draft vocabulary I_t at its step (no draft could propose it)."""
    corrections = [r for r in records if r.get("kind") == "step" and r.get("emitted") and rejected_nodes(r)]
    misses = sum(1 for r in corrections if (r.get("emitted_in_vocab") or [None])[-1] is False)
    return misses, len(corrections)


def accepted_by_origin(records: list) -> dict:
    """{"model": n, "context": m} accepted draft tokens by who drafted them (tree["origin"]); {} when the
    trace records no origin (every draft then came from the model)."""
    if not any("origin" in (r.get("tree") or {}) for r in records):
        return {}
    out = {"model": 0, "context": 0}
    for r in records:
        for node in r.get("accepted") or []:
            o = node_origin(r, node)
            out[o] = out.get(o, 0) + 1
    return out


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
                  runtime: str = "", records: list | None = None, notes: tuple = ()) -> str:
    """records: the run's record dicts (vocabulary-miss card, accepted tokens by origin); notes: extra
    footer lines (plain text)."""
    if not summary:
        return '<div class="speclens summary-panel summary-empty">Run a prompt to see tokens/s, acceptance and coverage.</div>'
    share, sp = lm_head_share(summary), speedup(summary, baseline)
    cards = [("tokens/s", f"{summary.get('tokens_per_s', 0):.1f}", "new tokens per second of engine time (timed inside the engine, as python -m core generate)"),
             ("mean acceptance", f"{summary.get('mean_accept_len', 0):.2f}", "tokens emitted per target pass (τ)"),
             ("mean |I_t|", _int(summary.get("mean_active_vocab")), "size of the active draft vocabulary"),
             ("coverage", _coverage(summary, method), "emitted tokens inside the draft vocabulary"),
             ("LM-head share", "—" if share is None else f"{100 * share:.0f}%", "LM head / all drafting time"),
             ("speedup vs AR", "—" if sp is None else f"{sp:.2f}×",
              "this run is plain decoding" if method == "ar" else
              "plain decoding of the same prompt runs after this one" if sp is None else
              "tokens/s ÷ plain decoding tokens/s (same prompt, settings and machine)"),
             ("vocab misses", _misses(records, method), "corrections whose target token lay outside I_t: "
              "no draft could propose it (the rest are model misses: in I_t, ranked low)")]
    html = "".join(f'<div class="card" data-card="{esc(k)}" title="{esc(h)}"><div class="card-v">{esc(v)}</div>'
                   f'<div class="card-k">{esc(k)}</div></div>' for k, v, h in cards)
    notes = tuple(notes) + _origin_note(records)
    extra = "".join(f'<div class="summary-note">{esc(n)}</div>' for n in notes)
    return (f'<div class="speclens summary-panel"><div class="cards">{html}</div>'
            f'{_footer(summary, method, lossless, runtime)}{extra}</div>')


def _misses(records, method) -> str:
    if records is None or method == "ar":
        return "—"
    misses, corrections = vocab_misses(records)
    return f"{misses} / {corrections}"


def _origin_note(records) -> tuple:
    by = accepted_by_origin(records or [])
    return (f"accepted draft tokens: {by['model']} from the draft model, {by['context']} from context",) if by else ()


def _footer(summary, method, lossless, runtime="") -> str:
    bits = [f"<b>{esc(method)}</b>" if method else "", f"{summary.get('new_tokens', 0)} tokens",
            f"{summary.get('steps', 0)} steps", _cut(summary.get("cut", ""))]
    if lossless is not None:
        bits.append(lossless_badge(lossless))
    bits.append(kernels_off_badge(runtime))
    tail = f'<span class="runtime"> · runtime: {esc(runtime)}</span>' if runtime else ""  # hidden on phones
    return '<div class="summary-footer">' + " · ".join(b for b in bits if b) + tail + "</div>"


def kernels_off_badge(runtime: str) -> str:
    """A warning, on phones too, where the runtime note says the fused CPU kernels did not load: why and the cost."""
    m = re.search(r"fused kernels off: [^)]*", runtime or "")
    return f'<span class="badge badge-warn kernels-off">{esc(m.group(0))}</span>' if m else ""


def lossless_badge(verdict: dict) -> str:
    """verdict: core.trace.stats.compare_to_ar's dict (the CLI's identical_to_ar / first_diff / near_tie)."""
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
    head = ("<tr><th>method</th><th>shape</th><th>tokens/s</th><th>speedup</th>"
            "<th title=\"the cost model on this machine's calibration\">predicted</th><th>accept len</th>"
            "<th title=\"tokens per step that match plain decoding on this machine\">break-even</th><th>mean |I_t|</th>"
            "<th>coverage</th><th title=\"corrections outside I_t / all corrections\">vocab misses</th>"
            "<th>LM-head share</th><th>lossless</th></tr>")
    body = "".join(_compare_row(r) for r in rows)
    return f'<div class="speclens compare-table"><table>{head}{body}</table></div>'


def _compare_row(r) -> str:
    if r.get("error"):
        return f'<tr><td><b>{esc(r["method"])}</b></td><td colspan="11" class="row-error">⚠ {esc(r["error"])}</td></tr>'
    s = r["summary"]
    share = lm_head_share(s)
    sp, pr = r.get("speedup"), r.get("predicted") or {}
    ll = r.get("lossless")
    cells = [f"<b>{esc(r['method'])}</b>", esc(pr.get("shape", "")), f"{s.get('tokens_per_s', 0):.1f}",
             "—" if sp is None else f"{sp:.2f}×", f"{pr['speedup']:.2f}×" if pr else "—",
             f"{s.get('mean_accept_len', 0):.2f}", f"{pr['break_even_tau']:.2f}" if pr else "—",
             _int(s.get("mean_active_vocab")),
             _coverage(s, r["method"]), _misses(r.get("records"), r["method"]),
             "—" if share is None else f"{100 * share:.0f}%",
             "—" if ll is None else lossless_badge(ll)]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def measured_line(meta: dict) -> str:
    """Where and when a shipped example was measured (meta["measured"], written by python -m core example)."""
    w = meta.get("measured")
    if not w:
        return ""
    load = (w.get("load_avg_before") or [None])[0]
    busy = f" (load {load:.1f})" if load is not None else ""
    return (f'<div class="measured" title="{esc(w.get("note", ""))}">Measured {esc(w.get("date", "")[:10])} · '
            f'{esc(w.get("cpu", ""))} · {esc(w.get("threads", ""))} threads · {esc(meta.get("runtime_note", ""))} · '
            f'shared machine{esc(busy)}</div>')
