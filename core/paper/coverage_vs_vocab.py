"""Figure 1b (viz.paper.fig_coverage_vs_vocab): coverage of generated tokens against vocabulary size, FR-Spec's static
top-K beside NanoSpec's dynamic I_t."""
from core.paper.grid import PAPER, _of
from core.paper.numbers import span
from core.trace.stats import aggregate, by_category

COVERAGE_COLS = ["category", "kind", "vocab_size", "coverage", "n_tokens"]


def coverage_table(rows, vocab_size) -> list:
    """Fig. 1b: per category, the fraction of generated tokens whose FR-Spec rank is < K (static
    top-K coverage), and NanoSpec's measured coverage at its mean |I_t|; tokens of the nanospec runs."""
    out = []
    for cat, g in by_category(_of(rows, "nanospec")).items():
        ranks = [k for r in g for k in r["trace"]["fr_rank"] if k >= 0]
        for k in _k_grid(vocab_size) if ranks else []:
            out.append({"category": cat, "kind": "frspec", "vocab_size": k,
                        "coverage": round(sum(x < k for x in ranks) / len(ranks), 4), "n_tokens": len(ranks)})
        a = aggregate(g)
        out.append({"category": cat, "kind": "nanospec", "vocab_size": round(a["mean_active_vocab"], 1),
                    "coverage": round(a["coverage"], 4), "n_tokens": a["coverable"]})
    return out


def _k_grid(vocab_size) -> list:
    ks, k = [], 64
    while k < vocab_size:
        ks.append(k)
        k *= 2
    return ks + [vocab_size]


def p_coverage(rows) -> str:
    head = "**fig1b_coverage_vs_vocab.** "
    nano = [r for r in rows if r["kind"] == "nanospec"]
    fr = [r for r in rows if r["kind"] == "frspec"]
    if not nano:
        return head + "No NanoSpec runs in this selection."
    at = []
    for r in nano:  # FR-Spec coverage at the first static size ≥ NanoSpec's |I_t|
        curve = [c for c in fr if c["category"] == r["category"] and c["vocab_size"] >= r["vocab_size"]]
        if curve:
            at.append((r["category"], r["coverage"], min(curve, key=lambda c: c["vocab_size"])["coverage"]))
    wins = sum(n > f for _, n, f in at)
    return (head + f"NanoSpec covers {span([r['coverage'] for r in nano], '{:.1%}')} of the generated tokens with a mean "
            f"|I_t| of {span([r['vocab_size'] for r in nano], '{:.0f}')} (paper: {PAPER['coverage']}, {PAPER['active']}). "
            f"At a static size ≥ that |I_t|, FR-Spec covers {span([f for _, _, f in at], '{:.1%}')}; NanoSpec is above "
            f"the FR-Spec curve in {wins} of {len(at)} categories"
            + (" — the premise of NanoSpec's Fig. 1b holds here." if at and wins == len(at)
               else " — where it is not, the static table wins at that size."))
