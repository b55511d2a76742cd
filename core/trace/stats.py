"""Every number derived from traces: one run's statistics
(`summarize`), the additive totals a benchmark row keeps (`run_totals`), the statistics of a group of rows
(`aggregate`), and the greedy losslessness verdict (`compare_to_ar`). The CLI, bench, the paper figures,
the benchmarks (bench/), the example traces and the app all reduce through these functions.

Per-step means are ratios of sums (Σ accepted tokens / Σ steps), so a group of runs weighs each step
once; steps and draft calls are floored at 1 in divisions, coverable tokens too."""
import math

from core.trace.record import DRAFT_TIMERS, ORIGINS, SOURCES, TIMERS  # noqa: F401  (names the reductions use)

# ---------------------------------------------------------------- one run

def run_totals(records) -> dict:
    """The additive counts of one run (a bench row keeps them): summed over runs they give any group's means.
    steps / step_tokens leave out the prefill record; new_tokens counts every emitted token."""
    steps = [r for r in records if r.kind != "prefill"]
    spec = [r for r in steps if r.kind == "step"]
    in_vocab = [v for r in spec for v in r.emitted_in_vocab]
    return {"new_tokens": len(tokens_of(records)), "steps": len(steps), "step_tokens": new_tokens_after_prefill(records),
            "draft_calls": sum(_draft_calls(r) for r in spec), "active_sum": sum(r.stream["active"] for r in spec),
            "covered": sum(1 for v in in_vocab if v), "coverable": len(in_vocab),
            "timing_ms": {k: sum(r.timing_ms[k] for r in records) for k in TIMERS},
            **{f"accept_{o}_sum": n for o, n in accepted_by_origin(steps).items()}}


def summarize(records: list, wall_s: float | None = None) -> dict:
    """Run-level numbers with the CLI's JSON keys. Prefill is excluded from per-step means; tokens/s is over
    `wall_s`, else over the summed timers."""
    t = run_totals(records)
    m = per_step(t)
    timing = {**t["timing_ms"], "total": sum(t["timing_ms"].values())}
    total_s = wall_s if wall_s is not None else timing["total"] / 1000
    return {"text": "".join(r.text for r in records), "new_tokens": t["new_tokens"], "steps": t["steps"],
            "draft_calls": t["draft_calls"], "mean_accept_len": m["mean_accept_len"],
            "mean_active_vocab": m["mean_active_vocab"], "coverage": m["coverage"], "timing_ms": timing,
            "lm_head_ms_per_call": m["lm_head_ms_per_call"],
            "tokens_per_s": t["new_tokens"] / total_s if total_s > 0 else 0.0,
            "cut": next((r.cut for r in records if r.cut), ""), **{f"accept_{o}": m[f"accept_{o}"] for o in ORIGINS}}


def per_step(t: dict) -> dict:
    """Means of (summed) run totals: τ = step tokens / steps, mean |I_t|, coverage, ms per draft call and per
    step, accepted draft tokens per step by origin. Rows without a count (hf runs, older files) count 0."""
    steps, calls = max(t.get("steps", 0), 1), max(t.get("draft_calls", 0), 1)
    ms = {k: t.get("timing_ms", {}).get(k, 0.0) for k in TIMERS}
    return {"mean_accept_len": t.get("step_tokens", 0) / steps, "mean_active_vocab": t.get("active_sum", 0) / steps,
            "coverage": t.get("covered", 0) / max(t.get("coverable", 0), 1), "lm_head_ms_per_call": ms["lm_head"] / calls,
            "draft_ms_per_step": sum(ms[k] for k in DRAFT_TIMERS) / steps, "verify_ms_per_step": ms["verify"] / steps,
            **{f"accept_{o}": t.get(f"accept_{o}_sum", 0) / steps for o in ORIGINS}}


def step_trace(records) -> dict:
    """What the paper figures need per run: per decode step |I_t|, emitted and covered counts,
    the FR-Spec rank of every emitted token, and stream entries by source."""
    steps = [r for r in records if r.kind != "prefill"]
    sources = {}
    for r in records:
        for _, src in r.stream.get("entered", []):
            sources[src] = sources.get(src, 0) + 1
    return {"active": [r.stream["active"] for r in steps], "emitted": [len(r.emitted) for r in steps],
            "covered": [sum(r.emitted_in_vocab) for r in steps],
            "fr_rank": [k for r in steps for k in r.emitted_fr_rank], "sources": sources}


def accepted_by_origin(records) -> dict:
    """Accepted draft tokens by the origin of their tree node ("model" | "context"; no "origin" = model)."""
    out = {o: 0 for o in ORIGINS}
    for r in records:
        origin = r.tree.get("origin") or ["model"] * len(r.tree.get("tokens", []))
        for i in r.accepted:
            out[origin[i]] += 1
    return out


def new_tokens_after_prefill(records) -> int:
    return sum(len(r.emitted) for r in records if r.kind != "prefill")


def tokens_of(records) -> list:
    return [t for r in records for t in r.emitted]


def _draft_calls(r) -> int:
    """Draft LM-head calls in a step = distinct depths expanded (one batched call per tree level)."""
    return int(r.tree.get("head_calls", 0))


# ---------------------------------------------------------------- many runs (rows of run_totals)

def aggregate(rows) -> dict:
    """Statistics of a group of rows (run_totals + wall_s, and `identical` / `tie` from verdict_fields):
    sums, tokens/s = Σ new tokens / Σ wall, the per_step means of the summed totals, and verdict counts
    (`compared`: rows with a verdict, `identical`, `ties`). steps and draft_calls come floored at 1."""
    t = {k: sum(r.get(k, 0) for r in rows) for k in ("new_tokens", "wall_s", "steps", "step_tokens", "draft_calls",
                                                     "active_sum", "covered", "coverable")}
    t |= {f"accept_{o}_sum": sum(r.get(f"accept_{o}_sum", 0) for r in rows) for o in ORIGINS}
    t["timing_ms"] = {k: sum(r["timing_ms"][k] for r in rows if "timing_ms" in r) for k in TIMERS}
    compared = [r for r in rows if r.get("identical") is not None]
    return {**t, "runs": len(rows), "steps": max(t["steps"], 1), "draft_calls": max(t["draft_calls"], 1),
            "tokens_per_s": t["new_tokens"] / max(t["wall_s"], 1e-9), "total_ms": sum(t["timing_ms"].values()),
            **per_step(t), "compared": len(compared), "identical": sum(bool(r["identical"]) for r in compared),
            "ties": sum(bool(r.get("tie")) for r in compared)}


def groups(rows, key: str, order) -> list:
    """[((category, name), rows)] per category and for `all`, name = row[key]; categories sorted with `all`
    last, names in `order`."""
    out = {}
    for r in rows:
        for cat in (r["category"], "all"):
            out.setdefault((cat, r[key]), []).append(r)
    return sorted(out.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], list(order).index(kv[0][1])))


def by_category(rows) -> dict:
    """category -> rows, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault(r["category"], []).append(r)
    return out


def tps_ratio(a: dict, base: dict | None):
    """tokens/s of aggregate `a` over that of `base`, to 3 decimals; "" without a baseline (None or 0 tokens/s)."""
    return round(a["tokens_per_s"] / base["tokens_per_s"], 3) if base and base["tokens_per_s"] else ""


# ---------------------------------------------------------------- the verdict

FP32_NOISE = 1e-4  # floor of the logit noise of an fp32 forward whose GEMMs sum in another order (GEMV vs GEMM)


def tie_tolerance(top: float, eps: float) -> float:
    """The margin within which two passes may pick different greedy tokens by rounding alone: one rounding
    step of the logits' dtype (machine epsilon `eps`: 2^-7 bf16, 2^-23 fp32) at the top logit's magnitude,
    and at least FP32_NOISE. bf16 at |top| = 20: 0.125; fp32: 1e-4."""
    step = eps * 2.0 ** (math.frexp(abs(top))[1] - 1) if top else 0.0
    return max(step, FP32_NOISE)


def compare_to_ar(records, ar_records) -> dict:
    """The one greedy losslessness verdict: `identical` only when the token sequences match exactly. A first
    divergence where either run's top-2 margin lies within its tie tolerance (`StepRecord.tie_tol`) is
    reported as a tie (`tie` True, still not identical): rounding, not the speculation, chose there.
    `verdict`: "identical" | "tie at token i" | "differs at token i"."""
    a, b = tokens_of(records), tokens_of(ar_records)
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None:
        if len(a) == len(b):
            return {"identical": True, "first_diff": None, "tie": False, "verdict": "identical"}
        i = min(len(a), len(b))
        return {"identical": False, "first_diff": i, "tie": False, "verdict": f"differs at token {i} (length)"}
    tie = any(m <= t for m, t in (_margin_at(records, i), _margin_at(ar_records, i)))
    return {"identical": False, "first_diff": i, "tie": tie, "verdict": f"{'tie' if tie else 'differs'} at token {i}"}


def verdict_fields(records, ar_records) -> dict:
    """identical / tie of one run against plain decoding (None without it), from compare_to_ar."""
    if ar_records is None:
        return {"identical": None, "tie": None}
    cmp = compare_to_ar(records, ar_records)
    return {"identical": cmp["identical"], "tie": cmp["tie"]}


def _margin_at(records, i: int) -> tuple:
    """(margin, tie tolerance) of the i-th emitted token; traces without tie_tol use the fp32 floor."""
    margins = [m for r in records for m in r.margin]
    tols = [t for r in records for t in (r.tie_tol or [FP32_NOISE] * len(r.margin))]
    return (margins[i], tols[i]) if i < len(margins) and i < len(tols) else (math.inf, 0.0)


# ---------------------------------------------------------------- acceptance by tree position

def acceptance_counts(records, depth: int, ranks: int) -> dict:
    """{"tried", "accepted"}: [depth][ranks] counts of the model's draft nodes whose parent was accepted (or is the
    root), by depth (0 = the first drafted token) and rank among the node's drafted siblings (0 = highest log q);
    summed over runs they give a[d][r] = accepted / tried (core/cost/model.py)."""
    tried = [[0] * ranks for _ in range(depth)]
    accepted = [[0] * ranks for _ in range(depth)]
    for r in records:
        if r.kind != "step":
            continue
        parents, logp = r.tree["parents"], r.tree["logp"]
        origin, path = r.tree.get("origin") or ["model"] * len(parents), set(r.accepted)
        for i, (par, d, rank) in enumerate(zip(parents, _depths(parents), _sibling_ranks(parents, logp))):
            if origin[i] == "model" and d < depth and rank < ranks and (par < 0 or par in path):
                tried[d][rank] += 1
                accepted[d][rank] += i in path
    return {"tried": tried, "accepted": accepted}


def acceptance_rates(counts: dict, floor: int = 1) -> list:
    """a[d][r] from acceptance_counts (0 where fewer than `floor` nodes were tried)."""
    return [[a / t if t >= floor else 0.0 for a, t in zip(ar, tr)] for ar, tr in zip(counts["accepted"], counts["tried"])]


def _depths(parents) -> list:
    out = []
    for p in parents:  # parents come before their children
        out.append(0 if p < 0 else out[p] + 1)
    return out


def _sibling_ranks(parents, logp) -> list:
    order = sorted(range(len(parents)), key=lambda i: (parents[i], -logp[i], i))
    ranks, last, n = [0] * len(parents), None, 0
    for i in order:
        n = n + 1 if parents[i] == last else 0
        ranks[i], last = n, parents[i]
    return ranks
