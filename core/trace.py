"""The trace: one StepRecord per engine step, and the run summary every consumer derives from it."""
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


def compare_to_ar(records, ar_records, tol: float = 1e-4) -> dict:
    """Greedy losslessness, tie-aware: sequences must match token for token; the only tolerated
    difference is a first divergence where the target's top-2 logits differ by < tol (a near-tie that
    fp rounding between batched and sequential passes may flip). After it, the runs legitimately differ."""
    a, b = tokens_of(records), tokens_of(ar_records)
    ma = [m for r in records for m in r.margin]
    mb = [m for r in ar_records for m in r.margin]
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None:
        same = len(a) == len(b)
        return {"identical": same, "first_diff": None if same else min(len(a), len(b)), "tie": False}
    tie = min(ma[i] if i < len(ma) else 1.0, mb[i] if i < len(mb) else 1.0) < tol
    return {"identical": tie, "first_diff": i, "tie": tie}
