"""NanoSpec's candidate stream S as a tape of token chips, the W_max window highlighted, and counters."""
from viz.tokens import chip_label, esc, records_upto, token_str

MAX_CHIPS = 180
SOURCE_NAMES = {"prompt": "prompt token", "prefill": "top-K_pre of prefill", "draft": "draft-tree token",
                "verify": "top-K_ver of verify"}


def stream_entries(records: list) -> list:
    """S reconstructed from the trace: [(id, source, record index)] in arrival order."""
    return [(e[0], e[1], i) for i, r in enumerate(records) for e in (r.get("stream") or {}).get("entered", [])]


def render_stream(trace: dict, step: int | None = None, max_chips: int = MAX_CHIPS) -> str:
    meta = trace.get("meta", {})
    recs = records_upto(trace, step)
    if not recs or not any((r.get("stream") or {}).get("entered") for r in trace.get("records", [])):
        return _empty_panel(meta)
    w_max = int((meta.get("cfg") or {}).get("w_max", 0) or 0) or 10**9
    entries = stream_entries(recs)
    now = len(recs) - 1
    tape = _tape(entries, meta.get("vocab", {}), w_max, now, max_chips)
    left = _left_chips(recs[-1], meta.get("vocab", {}))
    return (f'<div class="speclens stream-panel">{_counters(recs[-1], entries, now)}'
            f'{_minimap(len(entries), w_max)}<div class="stream-tape">{tape}</div>{left}{_stream_legend()}</div>')


def _tape(entries, vocab, w_max, now, max_chips) -> str:
    n = len(entries)
    start = max(0, n - max_chips)
    win_start = max(0, n - w_max)
    pre = [_chip(e, vocab, now, k) for k, e in enumerate(entries[start:win_start], start)]
    win = [_chip(e, vocab, now, k) for k, e in enumerate(entries[max(start, win_start):], max(start, win_start))]
    hidden = f'<span class="tape-more" title="older entries not drawn">… {start:,} earlier</span>' if start else ""
    window = (f'<span class="stream-window" title="window: the last W_max={w_max:,} entries of S; '
              f'I_t = their unique ids">{"".join(win)}</span>')
    return hidden + "".join(pre) + window


def _chip(entry, vocab, now, k) -> str:
    tid, src, rec_i = entry
    new = " chip-new" if rec_i == now else ""
    title = f"#{k} · id {tid} {token_str(vocab, tid)!r} · {SOURCE_NAMES.get(src, src)} · entered at step {rec_i}"
    return f'<span class="chip src-{esc(src)}{new}" title="{esc(title)}">{esc(chip_label(vocab, tid))}</span>'


def _left_chips(rec, vocab) -> str:
    left = (rec.get("stream") or {}).get("left", [])
    if not left:
        return ""
    chips = "".join(f'<span class="chip chip-left" title="{esc(f"id {t} left I_t this step")}">'
                    f"{esc(chip_label(vocab, t))}</span>" for t in left[:40])
    more = f" +{len(left) - 40}" if len(left) > 40 else ""
    return f'<div class="stream-left"><span class="stream-left-label">left I_t:</span>{chips}{more}</div>'


def _counters(rec, entries, now) -> str:
    st = rec.get("stream") or {}
    entered = len(st.get("entered", []))
    items = [("|S|", st.get("size_s", len(entries))), ("|I_t|", st.get("active", 0)),
             ("entered", entered), ("left", len(st.get("left", [])))]
    cells = "".join(f'<span class="counter"><b>{esc(k)}</b> {int(v):,}</span>' for k, v in items)
    return f'<div class="stream-counters"><span class="counter step-label">step {now}</span>{cells}</div>'


def _minimap(n, w_max) -> str:
    if n == 0:
        return ""
    lo = max(0, n - w_max)
    left_pct = 100.0 * lo / n
    return (f'<div class="stream-minimap" title="S has {n:,} entries; the window covers the last {n - lo:,}">'
            f'<span class="minimap-window" style="left:{left_pct:.1f}%;width:{100 - left_pct:.1f}%"></span></div>')


def _stream_legend() -> str:
    chips = "".join(f'<span class="chip src-{s}">{s}</span>' for s in SOURCE_NAMES)
    return (f'<div class="legend">{chips}<span class="chip chip-sample-window">in window W_max</span>'
            f'<span class="chip chip-left">left I_t</span><span class="legend-note">new chips pop in; '
            f'hover a chip for its id and source</span></div>')


def _empty_panel(meta) -> str:
    method = (meta.get("cfg") or {}).get("method", meta.get("method", ""))
    return (f'<div class="speclens stream-panel stream-empty">No candidate stream for method '
            f'<b>{esc(method)}</b>: only NanoSpec and NanoSlim build S and I_t.</div>')
