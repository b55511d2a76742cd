"""The status line above the Run tab's panels, run notes, and the Compare tab's texts: HTML strings."""
from viz.summary import measured_line
from viz.text import render_text
from viz.tokens import emitted_ids, esc


def source_note(trace: dict, live: bool = False) -> str:
    """What the panels show: the visitor's run, the shipped example, a loaded or a synthetic trace."""
    m = trace.get("meta", {})
    if m.get("synthetic"):
        what = "a synthetic demo trace (no example trace shipped yet)"
    elif live:
        what = "your run"
    else:
        what = "the shipped example" if m.get("example") else "a loaded trace"
    return (f'<div class="source-note">Showing {what}: <b>{esc(m.get("method", ""))}</b> on '
            f'<code>{esc(m.get("model", ""))}</code> ({esc(m.get("draft", ""))} draft).<span class="hint"> Press <b>Run</b> to '
            f'generate your own, or scrub the replay slider.</span>{measured_line(m) if not live else ""}</div>')


def status_note(msg: str) -> str:
    return f'<div class="source-note">{esc(msg)}</div>'


def error_note(msg: str) -> str:
    return f'<div class="error-box" role="alert">⚠ {esc(msg)}</div>'


def running_note(trace: dict) -> str:
    """While a run streams: its step and token count so far."""
    n = len(trace["records"])
    return f'<div class="source-note">Generating… step {n - 1} · {len(emitted_ids(trace))} tokens</div>'


def trace_notes(meta: dict) -> tuple:
    """Footer lines for the summary cards that change how to read the run."""
    cfg, notes = meta.get("cfg", {}), ()
    if meta.get("slim_factors") == "svd":
        notes += ("SlimSpec factors here are untrained (a truncated SVD of the head, no training on this pair): "
                  "expect most drafts rejected. Trained factors ship with the EAGLE draft head at its default rank.",)
    if cfg.get("method") in ("slimspec", "nanoslim") and cfg.get("rescore"):
        notes += (f"The low-rank head previews, then the full head's rows score each draft position's top "
                  f"{cfg['rescore']} preview ids again (SVD-softmax): it drafts what the full head would wherever "
                  f"those choices are among them. On the command line, --rescore 0 runs the papers' plain low-rank head.",)
    if cfg.get("method") == "nanospec" and cfg.get("preview"):
        notes += (f"Besides I_t, the full head's rows score each draft position's top {cfg['preview']} ids of the "
                  f"draft's low-rank head over the whole vocabulary: the rare tokens the stream misses can still be "
                  f"drafted. On the command line, --preview 0 runs the paper's NanoSpec.",)
    return notes


def compare_texts(runs: dict) -> str:
    """{method: trace} -> each method's text in a column, side by side."""
    cols = "".join(f'<div class="compare-col"><div class="compare-col-title">{esc(m)}</div>'
                   f'{render_text(t, None, legend=False)}</div>' for m, t in runs.items())
    return f'<div class="compare-grid">{cols}</div>'
