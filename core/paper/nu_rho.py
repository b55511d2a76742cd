"""SlimSpec's ν–ρ–κ model (viz.paper.fig_nu_rho): predicted against measured speedup over the full head."""
from core.config import METHODS
from core.paper.grid import _of
from core.trace.stats import aggregate

NU_RHO_COLS = ["method", "tau", "head_ms_per_call", "nu", "rho", "kappa", "predicted", "measured"]


def predicted_speedup(nu: float, rho: float, kappa: float) -> float:
    """SlimSpec: a step of Full costs T_o + T_h with κ = T_h / T_o; a method with head time ν·T_h and
    acceptance ratio ρ_τ = τ/τ_full runs at ρ_τ(T_o + T_h)/(T_o + νT_h) = ρ_τ(1+κ)/(1+νκ) of Full's speed."""
    return rho * (1 + kappa) / (1 + nu * kappa)


def nu_rho_table(rows) -> tuple:
    """(rows, κ): κ from the Full runs (LM-head time / everything else); per method ν (head ms per call
    over Full's), ρ_τ, the predicted and the measured speedup over Full."""
    full = _of(rows, "full")
    if not full:
        return [], 0.0
    af = aggregate(full)
    kappa = af["timing_ms"]["lm_head"] / max(af["total_ms"] - af["timing_ms"]["lm_head"], 1e-9)
    head_full = af["timing_ms"]["lm_head"] / af["draft_calls"]
    out = []
    for m in METHODS[1:]:
        g = _of(rows, m)
        if g:
            a = aggregate(g)
            head = a["timing_ms"]["lm_head"] / a["draft_calls"]
            nu, rho = head / max(head_full, 1e-9), a["mean_accept_len"] / af["mean_accept_len"]
            out.append({"method": m, "tau": round(a["mean_accept_len"], 3), "head_ms_per_call": round(head, 4), "nu": round(nu, 4),
                        "rho": round(rho, 4), "kappa": round(kappa, 4),
                        "predicted": round(predicted_speedup(nu, rho, kappa), 4), "measured": round(a["tokens_per_s"] / af["tokens_per_s"], 4)})
    return out, kappa


def p_nu_rho(rows, kappa) -> str:
    head = "**slimspec_nu_rho.** "
    if not rows:
        return head + "No Full run in this selection."
    err = [f"{r['method']} {r['predicted']:.3g} vs {r['measured']:.3g}" for r in rows if r["method"] != "full"]
    return (head + f"κ = {kappa:.3g}: the LM head is {kappa / (1 + kappa):.1%} of a Full step, so the model predicts at most "
            f"{1 + kappa:.3g}× from the head alone. Predicted vs measured speedup over Full: {'; '.join(err)}. "
            "Differences are costs the model leaves out (stream upkeep in `gather`, tree-size changes) and timing noise.")
