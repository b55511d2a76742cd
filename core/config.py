"""Engine options: one dataclass shared by the CLI, the UI and the benchmarks."""
from dataclasses import dataclass, asdict, fields

from core.errors import SpecError
from core.trace.record import SOURCES

METHODS = ("ar", "full", "frspec", "nanospec", "slimspec", "nanoslim")
SHAPES = ("tree", "chain", "context", "auto")  # context: no model draft; auto: core.cost.choose.resolve_shape
WINDOWS = ("suffix", "fifo")
BACKENDS = ("auto", "torch", "triton")
RUNTIMES = ("auto", "eager", "fast")
DRAFT_WEIGHTS = ("auto", "model", "int8", "int4")  # a separate draft model's layer weights (fast runtime)
SLIM_INITS = ("trained", "svd")
CONTEXTS = ("off", "on")

# server-side bounds: generous for the CLI, the UI clamps further
MAX_NEW_TOKENS = 4096
MAX_TREE = 128
MAX_W_MAX = 262144
MIN_TEMPERATURE = 0.01  # below it softmax(logits / T) under/overflows; use 0 for greedy


@dataclass
class SpecConfig:
    method: str = "nanospec"
    shape: str = "tree"
    window: str = "suffix"  # suffix: Unique(Suffix(S, W_max)); fifo: released code's FIFO of unique ids
    sources: str = "prompt,prefill,draft,verify"  # which chunks enter S (ablations: context / extension only)
    w_max: int = 3072
    k_pre: int = 3
    k_ver: int = 3
    fr_size: int = 8192
    rank: int = 0  # 0 = d // 8
    rescore: int = 0  # SlimSpec / NanoSlim: score each row's top-m low-rank ids again with the full rows (0 = off)
    preview: int = 0  # NanoSpec: each row also scores its top-m low-rank ids over V with the full rows (0 = off)
    slim_init: str = "trained"  # trained: the factors shipped with the draft head where they exist, else SVD; svd
    depth: int = 3  # draft shape; a model with a measured shape gets its own (core.models.Alias.draft_defaults)
    top_k: int = 2
    tree_size: int = 6
    gamma: int = 2
    context: str = "on"  # on: merge continuations of the token history into the draft tree (core/decoding/context.py)
    context_len: int = 8  # at most this many context nodes per step (all branches) on top of the model's tree
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    backend: str = "auto"
    timing: bool = True

    def validate(self, vocab_size: int | None = None, d: int | None = None) -> "SpecConfig":
        _choice("method", self.method, METHODS)
        _choice("shape", self.shape, SHAPES)
        _choice("window", self.window, WINDOWS)
        _choice("backend", self.backend, BACKENDS)
        _choice("slim_init", self.slim_init, SLIM_INITS)
        _choice("context", self.context, CONTEXTS)
        for src in self.source_set():
            _choice("source", src, SOURCES)
        _bound("w_max", self.w_max, 1, MAX_W_MAX)
        _bound("k_pre", self.k_pre, 0, 64)
        _bound("k_ver", self.k_ver, 0, 64)
        _bound("fr_size", self.fr_size, 1, MAX_W_MAX)
        _bound("depth", self.depth, 1, 16)
        _bound("top_k", self.top_k, 1, 16)
        _bound("tree_size", self.tree_size, 1, MAX_TREE)
        _bound("gamma", self.gamma, 1, 16)
        _bound("context_len", self.context_len, 1, MAX_TREE)
        _bound("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        _bound("seed", self.seed, 0, 2**63 - 1)
        _bound("rescore", self.rescore, 0, MAX_W_MAX)
        _bound("preview", self.preview, 0, MAX_W_MAX)
        _bound("rank", self.rank, 0, d if d is not None else MAX_W_MAX)
        _number("temperature", self.temperature)
        _number("top_p", self.top_p)
        if not (self.temperature == 0.0 or MIN_TEMPERATURE <= self.temperature <= 10.0):
            raise SpecError(f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE}, 10], got {self.temperature}")
        if self.shape == "context" and self.context != "on":
            raise SpecError("shape context drafts from the token history alone: it needs context on")
        if not (0.0 < self.top_p <= 1.0):
            raise SpecError(f"top_p must be in (0, 1], got {self.top_p}")
        return self

    def source_set(self) -> set:
        return {x.strip() for x in self.sources.split(",") if x.strip()}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SpecConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise SpecError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return cls(**d)


def _choice(name, value, allowed):
    if value not in allowed:
        raise SpecError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _number(name, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise SpecError(f"{name} must be a number, got {value!r}")


def _bound(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool) or not (lo <= value <= hi):
        raise SpecError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
