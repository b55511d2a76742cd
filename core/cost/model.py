"""Will speculation pay? A cost model of one speculative step from measured parts, and the draft shape it favours.

A step drafts an EAGLE-2 tree (core/decoding/tree.py: draft_tree) of depth D, k children per frontier node, pruned
to `size` nodes, then verifies size + 1 rows in one target pass. With
    a[d][r] = P(the node of sibling rank r at depth d is accepted | its parent was)      (Acceptance, per head)
a node's chance to be on the accepted path is the product of a along its path, and
    E[accepted] = Σ_{kept nodes} Π_path a          E[tokens per step] τ = 1 + E[accepted]
    t_step = σ · (t_backbone(τ) + t_head(1) + (D − 1) · (t_backbone(k) + t_head(k))) + t_verify(size + 1) + t_other
(the drafter first takes in the τ tokens the last step emitted, then drafts level by level; σ, the draft's time in the
engine over the curves', is measured: there the drafter and the head run between target passes; a draft model keeps
the accepted drafts of its expanded levels, E[held] of them, and takes in τ − E[held])
    speedup over plain decoding = τ · t_verify(1) / t_step                              (Costs, per machine)
Its ceiling is that of a drafter the target always accepts (a = 1 along a chain): what no acceptance can beat here.
A chain of γ is the tree (γ, 1, γ). The break-even τ of a shape is t_step / t_verify(1): the tokens a step must
emit to match plain decoding.
With context drafting on, a fraction f of steps finds a continuation in the token history (core/decoding/context.py),
and ModelSwitch drafts the model's tree as well where its running means say that raises tokens per ms (means kept
apart for steps with and without a continuation), exploring the other choice every EXPLORE-th step (every EXPLORE·FAR-th
where one side wins by more than CLOSE), its means started from these four kinds' calibrated costs (SwitchPrior: no
warm-up steps). Four kinds of step mix, each at its share p:
    no continuation:  plain, 1 token at t_1            or the model's tree, τ_m at t_m
    a continuation:   the context alone, τ_c at t_c    or both, τ_mc = τ_c + (τ_m − 1)(1 − α_c) at t_mc
    τ = Σ p τ_kind        t_step = Σ p t_kind                                               (switched)
with α_c ≈ 1 − 1/τ_c the chance that the context's first token is accepted (a geometric run of acceptances), and t_mc
the model's draft plus the verify of both trees' rows. A step that drafts the model first feeds the drafter every token
emitted since the last one that did, τ / p_model of them (catch_up), so t_m and t_mc grow as the model's share falls.
A whole run of N new tokens after a prompt of P tokens adds what both pay once, the target's prefill t_pre(P) (which
emits the first token), and the drafter's prefill t_dpre(P), which speculation alone pays:
    speedup of the run = (t_pre + (N − 1) · t_ar) / (t_pre + t_dpre + (N − 1) / τ · t_step)     (run_speedup)
"""
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product

from core.decoding.context import ModelSwitch


@dataclass
class Costs:
    """Milliseconds measured on one machine for one model pair, dtype and runtime (python -m core calibrate)."""
    verify: list                  # t_verify(n): the target's pass over n rows, n = 1 .. len
    backbone: list                # t_backbone(w): the drafter's pass over w rows, w = 1 .. len
    head: dict                    # method -> [t_head(w), w = 1 .. len]: one draft LM head call over w rows
    other: float = 0.0            # per step: stream upkeep, acceptance, bookkeeping
    mixed: float = 0.0            # per step beside the context's drafts: the bookkeeping over `other`
    draft_scale: float = 1.0      # the draft's time in the engine over the curves' (between target passes there)
    keeps: bool = False           # the drafter keeps its accepted drafts (Drafter.keeps_drafts): intake τ − held

    @staticmethod
    def at(xs: list, n: int) -> float:
        """xs[n - 1], linearly extrapolated past the measured end."""
        if n <= len(xs):
            return xs[max(n, 1) - 1]
        slope = (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        return xs[-1] + slope * (n - len(xs))

    def at_rows(self, xs: list, n: float) -> float:
        """xs at a mean row count n, linear between the whole counts around it."""
        lo = max(int(n), 1)
        return self.at(xs, lo) + (self.at(xs, lo + 1) - self.at(xs, lo)) * max(n - lo, 0.0)


@dataclass
class Acceptance:
    """a[d][r] for one head: d = 0 is the first drafted token; ranks and depths past the table count as 0."""
    a: list = field(default_factory=list)

    def p(self, d: int, r: int) -> float:
        return self.a[d][r] if d < len(self.a) and r < len(self.a[d]) else 0.0


@dataclass(frozen=True)
class Shape:
    depth: int
    top_k: int
    size: int

    @property
    def chain(self) -> bool:
        return self.top_k == 1

    def config(self) -> dict:
        """The SpecConfig fields that run this shape."""
        if self.chain:
            return {"shape": "chain", "gamma": self.depth}
        return {"shape": "tree", "depth": self.depth, "top_k": self.top_k, "tree_size": self.size}


def expected_accepted(acc: Acceptance, s: Shape) -> float:
    """E[accepted draft tokens] of the EAGLE-2 tree: each level expands the k best nodes of the last (by path
    value, as draft_tree by score), then the `size` best nodes of all levels are kept."""
    values, frontier = [], [1.0]
    for d in range(s.depth):
        level = [v * acc.p(d, r) for v in frontier for r in range(s.top_k)]
        values += level
        frontier = sorted(level, reverse=True)[:s.top_k]
    return sum(sorted(values, reverse=True)[:s.size])


def expected_held(acc: Acceptance, s: Shape) -> float:
    """E[accepted draft tokens the drafter already holds]: those of the expanded levels, every one but the last (the k
    best of each level, as draft_tree expands them)."""
    held, frontier = 0.0, [1.0]
    for d in range(s.depth - 1):
        frontier = sorted((v * acc.p(d, r) for v in frontier for r in range(s.top_k)), reverse=True)[:s.top_k]
        held += sum(frontier)
    return held


def taken_in(c: Costs, emitted: float, held: float) -> float:
    """The tokens the drafter takes in first at a step: those emitted since its last one, less the `held` accepted
    drafts it kept where it keeps them (Costs.keeps), at least the bonus token."""
    return max(emitted - held, 1.0) if c.keeps else emitted


def intake(c: Costs, acc: Acceptance, s: Shape, tau: float) -> float:
    """taken_in after a step of shape s that emitted tau tokens."""
    return taken_in(c, tau, expected_held(acc, s))


def draft_ms(c: Costs, method: str, s: Shape, intake: float) -> float:
    """The draft of one step of shape s with head `method`, the drafter first taking in `intake` tokens (a mean: read
    between the whole row counts), as the curves time it."""
    head = c.head[method]
    return c.at_rows(c.backbone, intake) + c.at(head, 1) + (s.depth - 1) * (c.at(c.backbone, s.top_k) + c.at(head, s.top_k))


def step_ms(c: Costs, method: str, s: Shape, intake: float) -> float:
    """t_step of one speculative step of shape s with head `method`, the drafter first taking in `intake` tokens."""
    return draft_ms(c, method, s, intake) * c.draft_scale + c.at(c.verify, s.size + 1) + c.other


def predicted_speedup(c: Costs, acc: Acceptance, method: str, s: Shape) -> float:
    tau = 1 + expected_accepted(acc, s)
    return tau * c.at(c.verify, 1) / step_ms(c, method, s, intake(c, acc, s, tau))


def break_even_tau(c: Costs, method: str, s: Shape, held: float = 0.0) -> float:
    """Tokens per step that shape s must emit to match plain decoding on this machine (τ = t_step / t_verify(1),
    solved with the drafter's intake at that τ, less `held` where it keeps its accepted drafts)."""
    tau = 1.0
    for _ in range(8):  # a fixed point: t_step grows slowly with τ (one drafter pass over τ rows)
        tau = step_ms(c, method, s, taken_in(c, tau, held)) / c.at(c.verify, 1)
    return tau


@lru_cache(maxsize=8)
def shape_grid(depths=range(2, 7), top_ks=range(2, 5), sizes=range(4, 17), chains=range(1, 7)) -> tuple:
    """The shapes the optimiser chooses from: trees (depth, top-k, size ≥ depth) and chains of γ."""
    trees = [Shape(d, k, n) for d, k, n in product(depths, top_ks, sizes) if d <= n <= d * k]
    return tuple(trees + [Shape(g, 1, g) for g in chains])


def best_of(grid, speedup) -> tuple:
    """(the shape s of grid with the highest speedup(s), that value); ties go to the smaller tree."""
    return max(((s, speedup(s)) for s in grid), key=lambda x: (round(x[1], 6), -x[0].size, -x[0].depth))


def best_shape(c: Costs, acc: Acceptance, method: str, grid=None) -> tuple:
    """(the shape of highest predicted speedup, that speedup)."""
    return best_of(grid or shape_grid(), lambda s: predicted_speedup(c, acc, method, s))


def ceiling(c: Costs, method: str, t_ar: float | None = None, grid=None) -> tuple:
    """(the chain, its speedup over a plain step of t_ar, default t_verify(1)) where the target accepts every drafted
    token (a[d][0] = 1): the most any drafter with these costs gains on this machine, whatever its acceptance."""
    chains = [s for s in grid or shape_grid() if s.chain]
    t_ar = t_ar or c.at(c.verify, 1)
    # every draft accepted, those of the expanded levels (all but the last) held
    return best_of(chains, lambda s: (s.depth + 1) * t_ar / step_ms(c, method, s, taken_in(c, s.depth + 1, s.depth - 1)))


def model_share(gain: float) -> float:
    """ModelSwitch's share of steps that draft the model, where drafting it multiplies tokens per ms by `gain`: the
    winning choice but every EXPLORE-th step (EXPLORE·FAR-th where one side wins by more than CLOSE)."""
    sw = ModelSwitch
    period = sw.EXPLORE if 1 / sw.CLOSE < gain < sw.CLOSE else sw.EXPLORE * sw.FAR
    return 1 - 1 / period if gain > 1 else 1 / period


def shares(plain: tuple, model: tuple, ctx: tuple, both: tuple, f: float) -> list:
    """Each kind's share of steps [plain, model, ctx, both], each kind given as (τ, t_ms): where the context has no
    continuation (1 − f of steps) plain or model, where it has one ctx or both, as ModelSwitch chooses from its means
    of each pair apart (tokens per ms with the model over without it), started from these costs (the calibration's
    SwitchPrior: no warm-up)."""
    def share(without: tuple, with_model: tuple) -> float:
        return model_share(with_model[0] * without[1] / (without[0] * with_model[1]))  # ModelSwitch.use_model's ratio
    p_none, p_ctx = share(plain, model), share(ctx, both)
    return [(1 - f) * (1 - p_none), (1 - f) * p_none, f * (1 - p_ctx), f * p_ctx]


def switched(plain: tuple, model: tuple, ctx: tuple, both: tuple, f: float) -> tuple:
    """(τ, t_step) of context drafting beside the model's tree: each kind of step at its share (shares)."""
    w, kinds = shares(plain, model, ctx, both, f), (plain, model, ctx, both)
    return sum(p * k[0] for p, k in zip(w, kinds)), sum(p * k[1] for p, k in zip(w, kinds))


def catch_up(tau: float, p_model: float) -> float:
    """Tokens the drafter takes in at a step that drafts the model: every token emitted since the last such step
    (DraftFeed feeds the skipped steps' tokens then), τ / p_model of them."""
    return tau / max(p_model, 1e-9)


def both_tau(tau_c: float, tau_m: float) -> float:
    """τ_mc of a step that verifies the context's branch and the model's tree: the model's tokens count where the
    context's first token is rejected (α_c ≈ 1 − 1/τ_c, a geometric run)."""
    return tau_c + (tau_m - 1) / tau_c


def run_speedup(t_ar: float, tau: float, t_step: float, n_new: int, t_pre: float, t_dpre: float) -> float:
    """The whole run's speedup over plain decoding: N = n_new tokens, prefills t_pre (both) and t_dpre (drafter)."""
    n = max(n_new - 1, 0)
    return (t_pre + n * t_ar) / (t_pre + t_dpre + n / tau * t_step)


def interpolate(xs: list, ys: list, x: float) -> float:
    """ys at x, piecewise linear over xs (ascending), extended by the end segments' slopes."""
    i = next((j for j in range(1, len(xs) - 1) if x <= xs[j]), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return max(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 0.0)
