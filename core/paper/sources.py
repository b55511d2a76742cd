"""Table 8 (viz.paper.fig_table): where the ids entering I_t come from, shares by source."""
from core.paper.grid import _of
from core.trace.record import SOURCES
from core.trace.stats import aggregate, by_category

SOURCE_COLS = ["category", *SOURCES, "entries_per_step"]


def sources_table(rows) -> list:
    """Table 8: where NanoSpec's stream entries come from, per category (shares of all entries)."""
    nano = _of(rows, "nanospec")
    out = []
    for cat, g in (list(by_category(nano).items()) + [("all", nano)]) if nano else []:
        counts = {s: sum(r["trace"]["sources"].get(s, 0) for r in g) for s in SOURCES}
        total = max(sum(counts.values()), 1)
        steps = aggregate(g)["steps"]
        out.append({"category": cat, **{s: round(n / total, 4) for s, n in counts.items()},
                    "entries_per_step": round((counts["draft"] + counts["verify"]) / steps, 2)})
    return out
