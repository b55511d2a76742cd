"""The trace: one StepRecord per engine step, and the run summary every consumer derives from it."""
import math
from dataclasses import dataclass, field, asdict

SOURCES = ("prompt", "prefill", "draft", "verify")
TIMERS = ("draft_backbone", "lm_head", "gather", "verify", "other")


@dataclass
class StepRecord:
    step: int
    kind: str  # "prefill" | "step" | "ar"
    tree: dict = field(default_factory=lambda: {"tokens": [], "parents": [], "logp": [], "in_vocab": []})
    accepted: list = field(default_factory=list)  # indices into tree nodes on the accepted path
    emitted: list = field(default_factory=list)  # accepted tokens + bonus
    emitted_in_vocab: list = field(default_factory=list)
    emitted_fr_rank: list = field(default_factory=list)
    emitted_draft_p: list = field(default_factory=list)  # None for the bonus token
    margin: list = field(default_factory=list)  # target's top-1 minus top-2 logit where each token was chosen
    tie_tol: list = field(default_factory=list)  # per token: the margin at or below which rounding may flip it
    stream: dict = field(default_factory=lambda: {"entered": [], "left": [], "size_s": 0, "active": 0})
    timing_ms: dict = field(default_factory=lambda: {k: 0.0 for k in TIMERS})
    text: str = ""
    finished: bool = False
    cut: str = ""  # why the run stopped early ("" = not cut)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        return cls(**d)


def summarize(records: list, wall_s: float | None = None) -> dict:
    """Run-level numbers with the CLI's JSON keys. Prefill is excluded from per-step means."""
    steps = [r for r in records if r.kind != "prefill"]
    emitted = [t for r in records for t in r.emitted]
    new_tokens = len(emitted)
    spec_steps = [r for r in steps if r.kind == "step"]
    timing = {k: sum(r.timing_ms[k] for r in records) for k in TIMERS}
    timing["total"] = sum(timing.values())
    in_vocab = [v for r in spec_steps for v in r.emitted_in_vocab]
    draft_calls = sum(_draft_calls(r) for r in spec_steps)
    total_s = wall_s if wall_s is not None else timing["total"] / 1000
    return {
        "text": "".join(r.text for r in records),
        "new_tokens": new_tokens,
        "steps": len(steps),
        "draft_calls": draft_calls,
        "mean_accept_len": new_tokens_after_prefill(records) / max(len(steps), 1),
        "mean_active_vocab": _mean([r.stream["active"] for r in spec_steps]),
        "coverage": _mean([1.0 if v else 0.0 for v in in_vocab]),
        "timing_ms": timing,
        "lm_head_ms_per_call": timing["lm_head"] / max(draft_calls, 1),
        "tokens_per_s": new_tokens / total_s if total_s > 0 else 0.0,
        "cut": next((r.cut for r in records if r.cut), ""),
        **{f"accept_{o}": n / max(len(steps), 1) for o, n in accepted_by_origin(steps).items()},
    }


def accepted_by_origin(records) -> dict:
    """Accepted draft tokens by the origin of their tree node ("model" | "context"; no "origin" = model)."""
    out = {"model": 0, "context": 0}
    for r in records:
        origin = r.tree.get("origin") or ["model"] * len(r.tree.get("tokens", []))
        for i in r.accepted:
            out[origin[i]] += 1
    return out


def new_tokens_after_prefill(records) -> int:
    return sum(len(r.emitted) for r in records if r.kind != "prefill")


def _draft_calls(r: StepRecord) -> int:
    """Draft LM-head calls in a step = distinct depths expanded (one batched call per tree level)."""
    return int(r.tree.get("head_calls", 0))


def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def tokens_of(records) -> list:
    return [t for r in records for t in r.emitted]


FP32_NOISE = 1e-4  # logit noise of a fp32 forward whose GEMMs sum in another order (GEMV vs GEMM: <= 6e-5 measured)


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


def _margin_at(records, i: int) -> tuple:
    """(margin, tie tolerance) of the i-th emitted token; traces without tie_tol use the fp32 floor."""
    margins = [m for r in records for m in r.margin]
    tols = [t for r in records for t in (r.tie_tol or [FP32_NOISE] * len(r.margin))]
    return (margins[i], tols[i]) if i < len(margins) and i < len(tols) else (math.inf, 0.0)
