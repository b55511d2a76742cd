"""The generated text, token by token: accepted (green), rejected (red, struck), target bonus (blue), prompt (grey).

Every view carries the rejected drafts; "the text" view (CSS class .view-text on the page) hides them, and
each target token's hover names the drafts it replaced. A target token outside the draft vocabulary I_t
at its step is a vocabulary miss (no draft could have proposed it), marked apart from a model miss."""
from viz.tokens import esc, fmt_in_vocab, fmt_prob, prob_from_logp, records_upto, token_str

LEGEND = (
    '<div class="legend" role="note">'
    '<span class="tok tok-prompt">prompt</span>'
    '<span class="tok tok-acc">accepted draft</span>'
    '<span class="tok tok-rej">rejected draft</span>'
    '<span class="tok tok-bonus">target token (bonus / correction)</span>'
    '<span class="tok tok-bonus tok-vmiss" title="outside I_t: no draft could propose it">vocabulary miss</span>'
    '<span class="tok tok-ar">plain decoding</span>'
    '<span class="legend-note">hover a token for step, draft probability, vocabulary membership and the '
    'drafts it replaced</span>'
    "</div>"
)
CONTEXT_KEY = '<span class="tok tok-acc tok-ctx">accepted, drafted from context</span>'
VMISS_NOTE = "outside I_t: no draft could propose it"


def render_text(trace: dict, step: int | None = None, legend: bool = True) -> str:
    """HTML for the text panel, up to record index `step` (None = whole run)."""
    vocab = trace.get("meta", {}).get("vocab", {})
    recs = records_upto(trace, step)
    now = len(recs) - 1
    parts = [_prompt_span(trace.get("meta", {}).get("prompt", ""))]
    for i, rec in enumerate(recs):
        parts.append(_record_spans(rec, vocab, now=(i == now and step is not None)))
    body = "".join(parts)
    key = LEGEND.replace("</div>", CONTEXT_KEY + "</div>") if has_origin(recs) else LEGEND
    return (f'<div class="speclens text-panel"><div class="text-scroll"><div class="text-body">{body}</div></div>'
            f'{key if legend else ""}</div>')


def has_origin(recs) -> bool:
    return any("origin" in (r.get("tree") or {}) for r in recs)


def _prompt_span(prompt: str) -> str:
    if not prompt:
        return ""
    return f'<span class="tok tok-prompt" title="prompt">{esc(prompt)}</span><span class="prompt-sep">⏎ </span>'


def _record_spans(rec: dict, vocab: dict, now: bool) -> str:
    kind = rec.get("kind", "step")
    if kind == "ar":
        spans = [_span(vocab, t, "tok-ar", f"step {rec['step']} · plain decoding (target token)") for t in rec["emitted"]]
    elif kind == "prefill":
        spans = [_bonus_span(rec, vocab, i, "prefill · first target token") for i in range(len(rec["emitted"]))]
    else:
        spans = _step_spans(rec, vocab)
    cls = "step-group step-now" if now else "step-group"
    return f'<span class="{cls}" data-step="{rec["step"]}">{"".join(spans)}</span>'


def _step_spans(rec: dict, vocab: dict) -> list:
    emitted = rec.get("emitted", [])
    n_acc = max(len(emitted) - 1, 0)
    spans = [_accepted_span(rec, vocab, i) for i in range(n_acc)]
    rejected = rejected_nodes(rec)
    spans += [_rejected_span(rec, vocab, j) for j in rejected]
    if emitted:
        what = "target correction" if rejected else "target bonus token"
        replaced = ", ".join(repr(token_str(vocab, rec["tree"]["tokens"][j])) for j in rejected)
        extra = f" · drafts rejected here: {replaced}" if replaced else ""
        spans.append(_bonus_span(rec, vocab, len(emitted) - 1, f"step {rec['step']} · {what}{extra}",
                                 miss_mark=bool(rejected)))
    return spans


def rejected_nodes(rec: dict) -> list:
    """Tree nodes proposed at the position where verification diverged: children of the last accepted node."""
    tree = rec.get("tree") or {}
    accepted = rec.get("accepted") or []
    last = accepted[-1] if accepted else -1
    return [j for j, par in enumerate(tree.get("parents", [])) if par == last and j not in accepted]


def _accepted_span(rec, vocab, i) -> str:
    p = _at(rec.get("emitted_draft_p"), i)
    iv = _at(rec.get("emitted_in_vocab"), i)
    ctx = node_origin(rec, _at(rec.get("accepted"), i)) == "context"
    how = "accepted draft (from context)" if ctx else "accepted draft"
    title = f"step {rec['step']} · {how} · draft p={fmt_prob(p)} · in active vocab: {fmt_in_vocab(iv)}"
    return _span(vocab, rec["emitted"][i], "tok-acc tok-ctx" if ctx else "tok-acc", title)


def node_origin(rec: dict, node) -> str:
    """Who drafted a tree node: "model" or "context" (tree["origin"]; missing = "model")."""
    origin = (rec.get("tree") or {}).get("origin")
    return origin[node] if origin and node is not None and 0 <= node < len(origin) else "model"


def _rejected_span(rec, vocab, j) -> str:
    tree = rec["tree"]
    p = prob_from_logp(_at(tree.get("logp"), j))
    iv = _at(tree.get("in_vocab"), j)
    title = f"step {rec['step']} · rejected draft · draft p={fmt_prob(p)} · in active vocab: {fmt_in_vocab(iv)}"
    return _span(vocab, tree["tokens"][j], "tok-rej", title, tag="del")


def _bonus_span(rec, vocab, i, what, miss_mark=False) -> str:
    """miss_mark: a correction's target token outside I_t is a vocabulary miss, as vocab_misses counts it."""
    iv = _at(rec.get("emitted_in_vocab"), i)
    miss = miss_mark and iv is False
    title = f"{what} · in active vocab: {fmt_in_vocab(iv)}" + (f" · {VMISS_NOTE}" if miss else "")
    extra = " tok-vmiss" if miss else ("" if iv is None or iv else " tok-oov")
    return _span(vocab, rec["emitted"][i], "tok-bonus" + extra, title)


def _span(vocab, tid, cls, title, tag="span") -> str:
    return f'<{tag} class="tok {cls}" title="{esc(title)}">{esc(token_str(vocab, tid))}</{tag}>'


def _at(xs, i):
    return xs[i] if xs is not None and 0 <= i < len(xs) else None
