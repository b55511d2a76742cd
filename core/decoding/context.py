"""Context drafter: continuations of the token history (prompt + emitted), proposed as deterministic
draft branches that the engine merges into the model's tree (core/decoding/tree.py `merge_context`).

Suffix match with adaptive n: the last n tokens of the history (n = max_n down to 1, longest first) are
looked up in an incremental index {n-gram -> latest end positions}; what followed them is the proposal.
Every appended token adds at most max_n keys, so the per-step cost does not grow with the context.

Score: a context token x proposed after a length-n match gets log α_n, where α_n is the running rate at
which such tokens were the target's next token (prior ALPHA_PRIOR, weight PRIOR_WEIGHT), so context and
model branches rank by one rule: cumulative log-prob.
"""
import math
from dataclasses import dataclass

ALPHA_PRIOR = {1: 0.25, 2: 0.4, 3: 0.55, 4: 0.65}  # P(next token = proposal | length-n match), before data
PRIOR_WEIGHT = 4.0
POSITIONS = 2  # end positions kept per n-gram (latest first): up to 2 distinct continuations per match
CONFIDENT = 0.5  # α of the best branch at or above which the step drafts from the context alone


@dataclass
class Branch:
    tokens: list  # proposed continuation of the root
    logp: list  # calibrated log-prob per token (log α_n)
    n: int  # length of the suffix match that proposed it


class ContextDrafter:
    def __init__(self, history=(), max_n: int = 4, max_len: int = 8, branches: int = 2, floor: float = 0.1):
        self.max_n, self.max_len, self.n_branches, self.floor = max_n, max_len, branches, math.log(floor)
        self.hist, self.ends = [], {}
        self.reached = {n: 0 for n in range(1, max_n + 1)}
        self.hits = {n: 0 for n in range(1, max_n + 1)}
        self.last = []  # the branches proposed at the current step
        self.switch = None  # ModelSwitch when a model drafter runs beside it in greedy decoding
        self.append(history)

    def append(self, tokens) -> None:
        """History ← history ⊕ tokens; index the n-grams whose continuation is now known."""
        for t in tokens:
            self.hist.append(int(t))
            i = len(self.hist) - 2  # n-grams ending at i are followed by hist[i + 1]
            for n in range(1, min(self.max_n, i + 1) + 1):
                key = tuple(self.hist[i - n + 1: i + 1])
                old = self.ends.get(key, ())
                self.ends[key] = (i,) + old[: POSITIONS - 1]

    def alpha(self, n: int) -> float:
        a0 = ALPHA_PRIOR.get(n, ALPHA_PRIOR[max(ALPHA_PRIOR)])
        return (self.hits[n] + a0 * PRIOR_WEIGHT) / (self.reached[n] + PRIOR_WEIGHT)

    def propose(self, max_len: int | None = None) -> list:
        """Branches continuing the history's suffix: longest match first, latest occurrence first; each cut
        where its cumulative calibrated log-prob drops below log(floor)."""
        max_len = self.max_len if max_len is None else max_len
        out, seen, L = [], set(), len(self.hist) - 1
        for n in range(min(self.max_n, L + 1), 0, -1):
            lp = math.log(self.alpha(n))
            keep = min(max_len, int(self.floor / lp) if lp < 0 else max_len)
            for e in self.ends.get(tuple(self.hist[L - n + 1:]), ()):
                cont = tuple(self.hist[e + 1: e + 1 + keep])
                if cont and cont not in seen and len(out) < self.n_branches:
                    seen.add(cont)
                    out.append(Branch(list(cont), [lp] * len(cont), n))
        self.last = out
        return out

    def use_model(self, branches) -> bool:
        """Whether this step also drafts a model tree (ModelSwitch where set, else `confident`)."""
        return self.switch.use_model(self, branches) if self.switch is not None else not self.confident(branches)

    def confident(self, branches) -> bool:
        """When the best branch's first token is at least as likely as not, a model tree would mostly
        re-propose it (used where timing must not steer the tree: sampling, reproducible by seed)."""
        return bool(branches) and branches[0].logp[0] >= math.log(CONFIDENT)

    def expected(self, branch: Branch | None) -> float:
        """E[accepted tokens] of a branch: Σ_k Π_{j≤k} α (the sum of its cumulative probabilities)."""
        out, c = 0.0, 0.0
        for lp in branch.logp if branch else []:
            c += lp
            out += math.exp(c)
        return out

    def update(self, emitted) -> None:
        """After a verify: calibrate α_n on the step's branches against the target's tokens, then extend
        the history. A branch token counts as reached when every token before it matched."""
        for b in self.last:
            for x, y in zip(b.tokens, emitted):
                self.reached[b.n] += 1
                if x != y:
                    break
                self.hits[b.n] += 1
        self.last = []
        self.append(emitted)


@dataclass(frozen=True)
class SwitchPrior:
    """ModelSwitch's means before a run's own steps, per side [no context branch, a branch]: a step's ms without and
    with the model's tree, and the model's tokens accepted per step that drafts it."""
    ms: tuple            # ((t_plain, t_model), (t_context, t_both))
    model_tokens: tuple  # (τ_m − 1, τ_mc − τ_c)


class ModelSwitch:
    """Greedy, per step (as SAM-Decoding switches on the suffix match): draft with the model as well only when
    the expected tokens per ms say so, from the measured mean step time with the model's tree (T_m) and
    without it (T_c), both verify rows and bookkeeping included:
        (1 + E_ctx + a_m) / T_m  >  (1 + E_ctx) / T_c
    E_ctx: expected accepted tokens of the best context branch (0 without one); a_m: model tokens accepted per
    model-drafted step. The means are kept apart for steps with and without a context branch: a branch's rows make
    a step dearer with or without the model, and pooled means weighed a plain step's model draft against the
    context's longer steps (SmolLM2: the model drafted on 66% of plain steps where it lost 13%). The first WARM
    steps of each kind measure; afterwards the other choice is explored every EXPLORE-th step while the two sides
    are within CLOSE of each other, and every EXPLORE * FAR-th step when one side clearly wins, so a model that
    never pays costs little. With a prior (this machine's calibration: core/cost/choose.py switch_prior) the means
    start as WARM steps of each kind at their calibrated costs, so a run starts from the calibration's choice instead
    of WARM steps with the model on each side (the pair on an AMD EPYC: 6 of a 64-token run's ~29 steps drafted the
    model at ~200 ms where a plain step took 32, 0.68x against the context alone's 1.01x); what the run measures then
    moves the means."""
    WARM, EXPLORE, FAR, CLOSE = 3, 8, 4, 1.25

    def __init__(self, prior: SwitchPrior | None = None):
        self.steps, self.branch = 0, 0
        self.n = [[0, 0], [0, 0]]  # [with a context branch][model drafted]: steps
        self.ms = [[0.0, 0.0], [0.0, 0.0]]  # their milliseconds
        self.model_tokens = [0, 0]  # [with a context branch]: model tokens accepted
        if prior is not None:
            w = self.WARM
            self.n = [[w, w], [w, w]]
            self.ms = [[w * t for t in side] for side in prior.ms]
            self.model_tokens = [w * g for g in prior.model_tokens]

    def use_model(self, ctx: ContextDrafter, branches) -> bool:
        self.steps += 1
        b = branches[0] if branches else None
        self.branch = c = int(b is not None)
        n, ms = self.n[c], self.ms[c]
        if min(n) < self.WARM:
            return n[1] < self.WARM
        e_ctx, gain = ctx.expected(b), self.model_tokens[c] / n[1]
        ratio = (1 + e_ctx + gain) * (ms[0] / n[0]) / ((1 + e_ctx) * (ms[1] / n[1]))  # tokens per ms with / without
        period = self.EXPLORE if 1 / self.CLOSE < ratio < self.CLOSE else self.EXPLORE * self.FAR
        return (ratio > 1) != (self.steps % period == 0)

    def observe(self, drafted: bool, step_ms: float, model_tokens: int) -> None:
        """The step just verified (of the kind use_model last saw: with or without a context branch)."""
        c = self.branch
        self.n[c][drafted] += 1
        self.ms[c][drafted] += step_ms
        self.model_tokens[c] += model_tokens if drafted else 0
