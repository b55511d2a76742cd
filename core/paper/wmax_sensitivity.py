"""Figure 5 (viz.paper.fig_wmax_sensitivity): acceptance, speed and |I_t| against the stream window W_max."""
from core.paper.grid import W_MAXES, _of
from core.trace.stats import aggregate

WMAX_COLS = ["w_max", "variant", "mean_accept_len", "tokens_per_s", "mean_active_vocab", "coverage"]


def wmax_table(rows, ids, base_w_max) -> list:
    """Fig. 5 on the sweep prompts: τ, tokens/s, |I_t|, coverage per W_max."""
    out = []
    for w in W_MAXES:
        g = _of(rows, "nanospec" if w == base_w_max else f"nanospec_w{w}", ids)
        if g:
            a = aggregate(g)
            out.append({"w_max": w, "variant": g[0]["variant"], "mean_accept_len": round(a["mean_accept_len"], 3),
                        "tokens_per_s": round(a["tokens_per_s"], 3), "mean_active_vocab": round(a["mean_active_vocab"], 1),
                        "coverage": round(a["coverage"], 4)})
    return out


def p_wmax(rows) -> str:
    head = "**fig5_wmax_sensitivity.** "
    if len(rows) < 2:
        return head + "Not enough W_max values ran."
    best = max(rows, key=lambda r: r["tokens_per_s"])
    return (head + f"τ goes from {rows[0]['mean_accept_len']:.3g} at W_max = {rows[0]['w_max']} to "
            f"{rows[-1]['mean_accept_len']:.3g} at {rows[-1]['w_max']} while |I_t| goes from "
            f"{rows[0]['mean_active_vocab']:.0f} to {rows[-1]['mean_active_vocab']:.0f}; the fastest W_max here is "
            f"{best['w_max']} ({best['tokens_per_s']:.3g} tok/s)." + _window_note(rows)
            + " Speeds within ~5% are noise on this shared CPU; τ and |I_t| are exact.")


def _window_note(rows) -> str:
    """Where |I_t| stops growing with W_max, the window never filled: larger W_max cannot change anything."""
    top = max(r["mean_active_vocab"] for r in rows)
    w = min(r["w_max"] for r in rows if r["mean_active_vocab"] == top)
    return (f" |I_t| is the same for every W_max ≥ {w}: S never outgrew that window in these generations, so "
            "larger values change nothing here (longer generations would)." if w < rows[-1]["w_max"] else "")
