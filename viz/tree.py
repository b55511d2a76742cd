"""The draft tree of one step as inline SVG: accepted path green, rejected siblings red, nodes outside I_t dashed,
nodes proposed by the context drafter (tree["origin"] == "context") marked with a purple corner dot."""
from viz.text import rejected_nodes
from viz.tokens import chip_label, esc, fmt_prob, prob_from_logp, token_str

COL_W, ROW_H, NODE_W, NODE_H = 96, 30, 84, 22
CONTEXT_COLOR = "#8e24aa"


def render_tree(trace: dict, step: int | None = None) -> str:
    recs = trace.get("records", [])
    if not recs:
        return _note("No steps yet.")
    idx = len(recs) - 1 if step is None else max(0, min(int(step), len(recs) - 1))
    rec = recs[idx]
    tree = rec.get("tree") or {}
    if not tree.get("tokens"):
        return _note(f"Step {idx}: {_why_no_tree(rec)}")
    vocab = trace.get("meta", {}).get("vocab", {})
    svg = tree_svg(rec, vocab, root_label=_root_label(recs, idx, vocab))
    return f'<div class="speclens tree-panel">{_caption(rec)}<div class="tree-scroll">{svg}</div>{_legend()}</div>'


def tree_svg(rec: dict, vocab: dict, root_label: str = "root") -> str:
    tree = rec["tree"]
    depth, order = _layout(tree["parents"])
    acc = set(rec.get("accepted") or [])
    rej = set(rejected_nodes(rec))
    pos = {-1: (0, _root_row(order, tree["parents"]))}
    for row, j in enumerate(order):
        pos[j] = (depth[j], row)
    bonus_pos = _bonus_pos(rec, pos)
    width = COL_W * (max(depth.values(), default=0) + 2) + 8
    rows = max([r for _, r in pos.values()] + [bonus_pos[1] if bonus_pos else 0]) + 1
    height = ROW_H * rows + 8
    parts = [_edge(pos[par], pos[j], j in acc) for j, par in enumerate(tree["parents"])]
    if bonus_pos:
        parts.append(_edge(pos[(rec.get("accepted") or [-1])[-1]], bonus_pos, True, cls="edge-bonus"))
    parts.append(_node(pos[-1], root_label, "node-root", "last committed token (root)"))
    parts += [_tree_node(rec, vocab, j, pos[j], acc, rej) for j in order]
    if bonus_pos:
        parts.append(_node(bonus_pos, chip_label(vocab, rec["emitted"][-1], 9), "node-bonus",
                           f"target token (bonus / correction): {token_str(vocab, rec['emitted'][-1])!r}"))
    return (f'<svg class="tree-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="draft tree of step {rec["step"]}">{"".join(parts)}</svg>')


def _layout(parents: list):
    """Depth of each node and a DFS row order (children in index order)."""
    kids = {}
    for j, par in enumerate(parents):
        kids.setdefault(par, []).append(j)
    depth, order, stack = {}, [], [(j, 1) for j in reversed(kids.get(-1, []))]
    while stack:
        j, d = stack.pop()
        depth[j] = d
        order.append(j)
        stack += [(c, d + 1) for c in reversed(kids.get(j, []))]
    return depth, order


def _root_row(order, parents) -> float:
    top = [r for r, j in enumerate(order) if parents[j] == -1]
    return (top[0] + top[-1]) / 2 if top else 0


def _bonus_pos(rec, pos):
    """The target's token sits one column right of the last accepted node, in its row when free."""
    if not rec.get("emitted"):
        return None
    acc = rec.get("accepted") or []
    col, row = pos[acc[-1]] if acc else pos[-1]
    taken = set(pos.values())
    if (col + 1, row) not in taken:
        return (col + 1, row)
    return (col + 1, max(r for _, r in taken) + 1)


def _xy(p):
    return 4 + p[0] * COL_W, 4 + p[1] * ROW_H


def _edge(a, b, on_path, cls="") -> str:
    (x1, y1), (x2, y2) = _xy(a), _xy(b)
    klass = f"edge {'edge-acc' if on_path else ''} {cls}".strip()
    return (f'<path class="{klass}" d="M{x1 + NODE_W} {y1 + NODE_H / 2} C{x1 + NODE_W + 8} {y1 + NODE_H / 2} '
            f'{x2 - 8} {y2 + NODE_H / 2} {x2} {y2 + NODE_H / 2}"/>')


def _tree_node(rec, vocab, j, p, acc, rej) -> str:
    tree = rec["tree"]
    tid = tree["tokens"][j]
    iv = tree.get("in_vocab", [None] * (j + 1))[j] if j < len(tree.get("in_vocab", [])) else None
    prob = prob_from_logp(tree["logp"][j] if j < len(tree.get("logp", [])) else None)
    cls = "node-acc" if j in acc else "node-rej" if j in rej else "node-draft"
    if iv is False:
        cls += " node-oov"
    state = {"node-acc": "accepted", "node-rej": "rejected", "node-draft": "not verified"}[cls.split()[0]]
    context = origin_of(tree, j) == "context"
    if context:
        cls += " node-ctx"
        title = f"node {j} · {token_str(vocab, tid)!r} · from the context (prompt lookup) · {state}"
    else:
        title = f"node {j} · {token_str(vocab, tid)!r} · draft p={fmt_prob(prob)} · {state} · in I_t: {iv}"
    label = chip_label(vocab, tid, 9) + (" ∉I" if iv is False else "")
    return _node(p, label, cls, title, dot=context)


def origin_of(tree: dict, j: int) -> str:
    """"model" | "context" (a trace without origins is all model)."""
    origin = tree.get("origin") or []
    return origin[j] if j < len(origin) else "model"


def _node(p, label, cls, title, dot=False) -> str:
    x, y = _xy(p)
    mark = f'<circle class="ctx-dot" cx="{x + NODE_W - 5}" cy="{y + 5}" r="3.5" fill="{CONTEXT_COLOR}"/>' if dot else ""
    return (f'<g class="node {cls}"><title>{esc(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6"/>'
            f'<text x="{x + NODE_W / 2}" y="{y + NODE_H / 2 + 4}" text-anchor="middle">{esc(label)}</text>{mark}</g>')


def _root_label(recs, idx, vocab) -> str:
    prev = [t for r in recs[:idx] for t in r.get("emitted", [])]
    return chip_label(vocab, prev[-1], 9) if prev else "root"


def _caption(rec) -> str:
    n = len(rec["tree"]["tokens"])
    a = len(rec.get("accepted") or [])
    oov = sum(1 for v in rec["tree"].get("in_vocab", []) if v is False)
    ctx = sum(1 for o in rec["tree"].get("origin") or [] if o == "context")
    return (f'<div class="tree-caption">step {rec["step"]} · {n} draft nodes · {a} accepted'
            f' + 1 target token · {oov} outside I_t' + (f' · {ctx} from the context' if ctx else '') + '</div>')


def _legend() -> str:
    return ('<div class="legend"><span class="chip node-key node-acc">accepted</span>'
            '<span class="chip node-key node-rej">rejected</span><span class="chip node-key node-draft">not verified</span>'
            '<span class="chip node-key node-bonus">target token</span>'
            '<span class="chip node-key node-oov">∉I outside I_t (dashed)</span>'
            f'<span class="chip node-key"><span style="color:{CONTEXT_COLOR}">●</span> from the context</span></div>')


def _why_no_tree(rec) -> str:
    return {"prefill": "prefill — the target reads the prompt; no draft yet.",
            "ar": "plain decoding — no draft tree."}.get(rec.get("kind"), "no draft tree recorded.")


def _note(msg) -> str:
    return f'<div class="speclens tree-panel tree-empty">{esc(msg)}</div>'
