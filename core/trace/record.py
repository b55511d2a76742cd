"""The trace record: one StepRecord per engine step, and the names its fields use (core/trace/stats.py derives
every number from a list of them)."""
from dataclasses import asdict, dataclass, field

TIMERS = ("draft_backbone", "lm_head", "gather", "verify", "other")  # keys of StepRecord.timing_ms
DRAFT_TIMERS = TIMERS[:3]  # the draft step: backbone + gather of I_t + LM head
SOURCES = ("prompt", "prefill", "draft", "verify")  # chunks that enter NanoSpec's stream S
ORIGINS = ("model", "context")  # who proposed a draft-tree node


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
