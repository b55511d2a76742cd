"""Table 4 (viz.paper.fig_latency_table): draft-step latency per LM-head call (backbone, gather, head)."""
from core.config import METHODS
from core.paper.grid import _of
from core.trace.record import DRAFT_TIMERS
from core.trace.stats import aggregate

LATENCY_COLS = ["method", "draft_steps", "backbone_ms", "gather_ms", "lm_head_ms", "total_ms", "verify_ms_per_step"]


def latency_table(rows) -> list:
    """Table 4: ms per draft step (one batched LM-head call per tree level) over all main runs."""
    out = []
    for m in METHODS[1:]:
        g = _of(rows, m)
        if not g:
            continue
        a = aggregate(g)
        per = {k: a["timing_ms"][k] / a["draft_calls"] for k in DRAFT_TIMERS}
        out.append({"method": m, "draft_steps": a["draft_calls"], "backbone_ms": round(per["draft_backbone"], 3),
                    "gather_ms": round(per["gather"], 3), "lm_head_ms": round(per["lm_head"], 3),
                    "total_ms": round(sum(per.values()), 3), "verify_ms_per_step": round(a["timing_ms"]["verify"] / a["steps"], 3)})
    return out


def _change(lat, key) -> str:
    return f"{100 * (lat['nanospec'][key] / max(lat['full'][key], 1e-9) - 1):+.1f}%"
