"""NanoSpec's candidate stream as a tape of token chips, the W_max window highlighted, and counters.

A record's `stream` has `entered`/`left` (ids entering / leaving I_t this step), `size_s` (|S|) and `active`
(|I_t|). When it also carries `appended` ([[source, [ids...]], ...]: the raw chunks appended to S) the tape
is S itself with the last W_max entries highlighted; otherwise it is I_t's arrival log: one chip per entry of
an id into I_t, ids that left since drawn before the highlighted window (which then is exactly I_t).
"""
from viz.tokens import chip_label, esc, records_upto, token_str

MAX_CHIPS = 240
SOURCE_NAMES = {"prompt": "prompt token", "prefill": "top-K_pre of prefill", "draft": "draft-tree token",
                "verify": "top-K_ver of verify"}


def has_raw_stream(records: list) -> bool:
    return any("appended" in (r.get("stream") or {}) for r in records)


def s_entries(records: list) -> list:
    """S exactly, from raw chunks: [(id, source, record index)]."""
    return [(int(t), src, i) for i, r in enumerate(records)
            for src, ids in (r.get("stream") or {}).get("appended", []) for t in ids]


def arrival_log(records: list) -> tuple:
    """I_t's arrival log: ([(id, source, record index)], [still in I_t?]) in order of entry."""
    log, live = [], {}
    for i, r in enumerate(records):
        st = r.get("stream") or {}
        for t in st.get("left", []):
            live.pop(int(t), None)
        for t, src in st.get("entered", []):
            live[int(t)] = len(log)
            log.append((int(t), src, i))
    active_idx = set(live.values())
    return log, [k in active_idx for k in range(len(log))]


def render_stream(trace: dict, step: int | None = None, max_chips: int = MAX_CHIPS) -> str:
    meta = trace.get("meta", {})
    recs = records_upto(trace, step)
    if not recs or not any((r.get("stream") or {}).get("active") for r in trace.get("records", [])):
        return _empty_panel(meta)
    w_max = int((meta.get("cfg") or {}).get("w_max", 0) or 0) or 10**9
    vocab, now = meta.get("vocab", {}), len(recs) - 1
    if has_raw_stream(recs):
        entries = s_entries(recs)
        in_win = [k >= len(entries) - w_max for k in range(len(entries))]
        what = f"S, the candidate stream (window = last W_max = {w_max:,} entries)"
    else:
        entries, in_win = arrival_log(recs)
        what = "I_t's arrival log: one chip per id entering I_t (highlighted = I_t now)"
    tape = _tape(entries, in_win, vocab, w_max, now, max_chips)
    st = recs[-1].get("stream") or {}
    return (f'<div class="speclens stream-panel">{_counters(st, now)}{_minimap(st.get("size_s", 0), w_max)}'
            f'<div class="stream-what">{esc(what)}</div><div class="stream-tape"><div class="tape-body">{tape}</div></div>'
            f'{_left_chips(st, vocab)}{_stream_legend()}</div>')


def _tape(entries, in_win, vocab, w_max, now, max_chips) -> str:
    """Out-of-window chips first, then the window span; the oldest chips beyond max_chips are not drawn."""
    idx = list(range(len(entries)))
    out_k, win_k = [k for k in idx if not in_win[k]], [k for k in idx if in_win[k]]
    budget_out = max(0, max_chips - len(win_k))
    hidden = len(out_k) - min(len(out_k), budget_out) + max(0, len(win_k) - max_chips)
    out_k, win_k = out_k[len(out_k) - min(len(out_k), budget_out):], win_k[-max_chips:]
    pre = "".join(_chip(entries[k], vocab, now, k, " chip-out") for k in out_k)
    win = "".join(_chip(entries[k], vocab, now, k, "") for k in win_k)
    more = f'<span class="tape-more" title="older chips not drawn">… {hidden:,} earlier</span>' if hidden else ""
    title = f"window: I_t = Unique(Suffix(S, W_max={w_max:,}))"
    return f'{more}{pre}<span class="stream-window" title="{esc(title)}">{win}</span>'


def _chip(entry, vocab, now, k, extra) -> str:
    tid, src, rec_i = entry
    new = " chip-new" if rec_i == now else ""
    title = f"#{k} · id {tid} {token_str(vocab, tid)!r} · {SOURCE_NAMES.get(src, src)} · step {rec_i}"
    return f'<span class="chip src-{esc(src)}{new}{extra}" title="{esc(title)}">{esc(chip_label(vocab, tid))}</span>'


def _left_chips(st, vocab) -> str:
    left = st.get("left", [])
    if not left:
        return ""
    chips = "".join(f'<span class="chip chip-left" title="{esc(f"id {t} left I_t this step")}">'
                    f"{esc(chip_label(vocab, t))}</span>" for t in left[:40])
    more = f" +{len(left) - 40}" if len(left) > 40 else ""
    return f'<div class="stream-left"><span class="stream-left-label">left I_t this step:</span>{chips}{more}</div>'


def _counters(st, now) -> str:
    items = [("|S|", st.get("size_s", 0)), ("|I_t|", st.get("active", 0)),
             ("entered", len(st.get("entered", []))), ("left", len(st.get("left", [])))]
    cells = "".join(f'<span class="counter"><b>{esc(k)}</b> {int(v):,}</span>' for k, v in items)
    return f'<div class="stream-counters"><span class="counter step-label">step {now}</span>{cells}</div>'


def _minimap(size_s, w_max) -> str:
    if not size_s:
        return ""
    lo = max(0, size_s - w_max)
    left_pct = 100.0 * lo / size_s
    return (f'<div class="stream-minimap" title="S has {size_s:,} entries; the W_max window covers the last '
            f'{size_s - lo:,}"><span class="minimap-window" style="left:{left_pct:.1f}%;width:{100 - left_pct:.1f}%">'
            f'</span></div>')


def _stream_legend() -> str:
    chips = "".join(f'<span class="chip src-{s}">{s}</span>' for s in SOURCE_NAMES)
    return (f'<div class="legend">{chips}<span class="chip chip-sample-window">inside the window</span>'
            f'<span class="chip chip-out">outside</span><span class="chip chip-left">left I_t</span>'
            f'<span class="legend-note">new chips pop in (bold, amber border); hover a chip for id, source, step</span></div>')


def _empty_panel(meta) -> str:
    method = (meta.get("cfg") or {}).get("method", meta.get("method", ""))
    return (f'<div class="speclens stream-panel stream-empty">No candidate stream for method '
            f'<b>{esc(method)}</b>: only NanoSpec and NanoSlim build S and I_t.</div>')
