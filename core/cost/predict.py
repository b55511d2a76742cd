"""What a calibration predicts: the cost model (core/cost/model.py) read from this machine's measured step costs and a
model pair's acceptance table (core/cost/store.py), as the Verdict of one method at one shape: its tokens per step,
break-even τ, speedup step for step and over a whole run, with context drafting mixed in as ModelSwitch mixes it, and
read at the moment of a probe (core/cost/probe.py) where one is given.
"""
from dataclasses import dataclass

from core.config import SpecConfig
from core.cost import model as cost
from core.cost.store import CONTEXT, CONTEXT_ONE, MIXED
from core.decoding.heads import STREAM_METHODS
from core.decoding.tree import tree_shape


def costs_of(data: dict, method: str) -> cost.Costs:
    mixed = data["other"].get(MIXED, {}).get("model", 0.0)
    return cost.Costs(verify=data["verify"], backbone=data["backbone"], head=data["head"], other=data["other"][method],
                      mixed=mixed, draft_scale=data.get("draft_scale", {}).get(method) or 1.0,
                      keeps=bool(data.get("drafter_keeps")))


def shape_of(cfg: SpecConfig) -> cost.Shape | None:
    """The cost model's Shape of a config (None: drafting from the context alone)."""
    return None if cfg.shape == CONTEXT else cost.Shape(*tree_shape(cfg))


def shape_name(s: cost.Shape | None) -> str:
    if s is None:
        return "context alone"
    return f"chain {s.depth}" if s.chain else f"tree {s.depth}/{s.top_k}/{s.size}"


def shape_label(cfg: SpecConfig) -> str:
    """The shape a config runs, as the cost model names it ("tree 4/2/8", "chain 3", "context alone", "plain
    decoding")."""
    return "plain decoding" if cfg.method == "ar" else shape_name(shape_of(cfg))


def mixes_context(cfg: SpecConfig) -> bool:
    """Whether a run of cfg drafts the model beside the context (not plain decoding, not the context alone)."""
    return cfg.method != "ar" and cfg.shape != CONTEXT and cfg.context == "on"


@dataclass
class ContextSteps:
    """Drafting from the context, as measured: a fraction f of steps finds a continuation and verifies rows_c rows for
    tau_c tokens in t_c ms; the rest verify 1 row for 1 token in t_1 ms."""
    f: float
    tau_c: float
    rows_c: float
    t_c: float
    t_1: float

    def alone(self) -> tuple:
        """(τ, t_step) of drafting from the context alone."""
        return self.f * self.tau_c + 1 - self.f, self.f * self.t_c + (1 - self.f) * self.t_1


def context_steps(data: dict, acc: dict, mixed: bool = False) -> ContextSteps | None:
    """The context's steps from its measured tokens and verify rows per step (None without the context entry), each
    kind (a continuation's rows, 1 row) with its own bookkeeping; mixed: the bookkeeping they have beside the model's
    tree (where measured)."""
    other = data.get("other", {})
    if mixed and MIXED in other:
        other = other[MIXED]
    ctx, o_c, o_1 = acc.get(CONTEXT), other.get(CONTEXT), other.get(CONTEXT_ONE)
    if not ctx or o_c is None or o_1 is None:
        return None
    c = cost.Costs(verify=data["verify"], backbone=data["backbone"], head={})
    t_1, f = c.at(c.verify, 1) + o_1, ctx.get("drafted", 1.0)
    if f <= 0:
        return ContextSteps(0.0, 1.0, 1.0, t_1, t_1)
    tau_c, rows_c = 1 + (ctx["tau"] - 1) / f, 1 + (ctx["rows"] - 1) / f  # over the steps that found one
    return ContextSteps(f, tau_c, rows_c, c.at_rows(c.verify, rows_c) + o_c, t_1)


def step_kinds(c: cost.Costs, method: str, s: cost.Shape, tau_m: float, cs: ContextSteps, intake=None,
               held: float = 0.0) -> tuple:
    """(τ, t_ms) of the four kinds of step ModelSwitch mixes: plain, the model's tree, the context's branch, both;
    intake: the tokens emitted since the drafter's last step, at a step that drafts the model (None: τ_m, the model
    every step), of which it kept `held` drafts (cost.expected_held, where it keeps them)."""
    t_m = cost.step_ms(c, method, s, cost.taken_in(c, tau_m if intake is None else intake, held)) + c.mixed
    t_both = t_m - c.at(c.verify, s.size + 1) + c.at_rows(c.verify, s.size + cs.rows_c)  # both trees' rows
    return (1.0, cs.t_1), (tau_m, t_m), (cs.tau_c, cs.t_c), (cost.both_tau(cs.tau_c, tau_m), t_both)


def mixed_kinds(c: cost.Costs, method: str, s: cost.Shape, tau_m: float, cs: ContextSteps, held: float = 0.0) -> tuple:
    """step_kinds with the drafter's catch-up (cost.catch_up): the rarer the model's steps, the more tokens each takes
    in first (the pair on an AMD EPYC: 237–326 ms of draft backbone at a 32nd-step exploration, against ~65 ms a step
    drafting every step), which makes them rarer still: a fixed point."""
    kinds = step_kinds(c, method, s, tau_m, cs, held=held)
    for _ in range(4):
        w = cost.shares(*kinds, cs.f)
        tau = sum(p * k[0] for p, k in zip(w, kinds))
        kinds = step_kinds(c, method, s, tau_m, cs, cost.catch_up(tau, w[1] + w[3]), held)
    return kinds


def with_model(c: cost.Costs, method: str, s: cost.Shape, tau_m: float, cs: ContextSteps, held: float = 0.0) -> tuple:
    """(τ, t_step) of the model's tree s beside the context's steps, as ModelSwitch mixes them (cost.switched)."""
    return cost.switched(*mixed_kinds(c, method, s, tau_m, cs, held), cs.f)


@dataclass
class Verdict:
    """The cost model's numbers for one method at one shape on this machine."""
    method: str
    shape: str
    tau: float                    # predicted tokens per step
    break_even_tau: float         # tokens per step that match plain decoding
    speedup: float                # predicted, over plain decoding, step for step
    t_step_ms: float
    t_ar_ms: float
    run_speedup: float | None = None  # predicted for the whole run (prefills included: cost.run_speedup)
    context: bool = False         # drafting from the context (alone, or beside the model's tree)
    ceiling: float | None = None  # step for step, a draft the target always accepts (cost.ceiling); None: no model

    def as_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def rescale(curve: list, r_one: float, r_rest: float, base: float | None = None) -> list:
    """curve with its 1-row part (base: curve[0]) times r_one and what more rows add times r_rest."""
    base = curve[0] if base is None else base
    return [base * r_one + (t - base) * r_rest for t in curve]


def ratios(cal: list, now: dict) -> tuple:
    """(r_one, r_rest) of a probe now = {"rows": [1, k], "ms": [t(1), t(k)]} over the calibrated curve cal: a 1-row
    pass moves with the read bandwidth, the rows past it with the cores' share (r_rest = r_one where cal is flat)."""
    (one, k), (t1, tk) = now["rows"], now["ms"]
    c1, ck = cost.Costs.at(cal, one), cost.Costs.at(cal, k)
    if c1 <= 0:  # nothing to scale from
        return 1.0, 1.0
    r_one = t1 / c1
    return r_one, (tk - t1) / (ck - c1) if ck - c1 > 0.1 * c1 else r_one


def anchored(data: dict, probe: dict | None) -> dict:
    """data read at the moment of a probe (core/cost/probe.py: probe) instead of the calibration's: the
    target's curves, prefill included, scaled by the target's ratios, the drafter's and the heads' by the drafter's.
    On a VM whose bandwidth and core share drift apart between processes (AMD EPYC: a pair's t(1) 23.5–35.5 ms in
    three calibrations of one day), one factor cannot re-anchor both a 1-row pass and a 9-row one; two can."""
    if not probe:
        return data
    t_one, t_rest = ratios(at_context(data, probe["n_ctx"])["verify"], probe["target"])
    b_one, b_rest = ratios(data["backbone"], probe["draft"]) if "draft" in probe else (1.0, 1.0)
    out = {**data, "verify": rescale(data["verify"], t_one, t_rest), "backbone": rescale(data["backbone"], b_one, b_rest),
           "head": {m: [t * b_one for t in h] for m, h in data["head"].items()}}
    if data.get("verify_by_context"):
        out["verify_by_context"] = {c: rescale(v, t_one, t_rest) for c, v in data["verify_by_context"].items()}
    if data.get("prefill"):
        pre = data["prefill"]
        out["prefill"] = {**pre, "target": rescale(pre["target"], t_one, t_rest, data["verify"][0]),
                          "draft": rescale(pre["draft"], b_one, b_rest, data["backbone"][0])}
    return out | {"probe": probe}


def ar_ms(data: dict) -> float:
    """Plain decoding's step: the target's 1-row pass and its bookkeeping (calibrations before it was measured: 0)."""
    return data["verify"][0] + data.get("other", {}).get("ar", 0.0)


def at_context(data: dict, n_ctx: float) -> dict:
    """data with its target curve read at n_ctx committed tokens (linear between the measured contexts, the nearest
    one's outside them: two noisy points extrapolated may fall to 0; attention grows with them): a run's steps see its
    prompt and half its new tokens on average."""
    by = data.get("verify_by_context") or {}
    if len(by) < 2:
        return data
    xs = sorted(int(c) for c in by)
    n_ctx = min(max(n_ctx, xs[0]), xs[-1])
    curve = [cost.interpolate(xs, [by[str(c)][i] for c in xs], n_ctx) for i in range(len(data["verify"]))]
    return {**data, "verify": curve}


def whole_run(data: dict, tau: float, t_step: float, run: tuple | None, drafter: bool = True,
              rows_logits: bool = False) -> float | None:
    """cost.run_speedup for run = (prompt tokens, new tokens), from the calibration's prefill curves (None without);
    drafter=False: no drafter prefill (the context alone runs no draft model: Pipeline.run); rows_logits: the head
    reads every prompt row's logits (Head.needs_prefill_logits), which speculation alone pays beside the drafter's."""
    pre = data.get("prefill")
    if run is None or not pre:
        return None
    t_pre, t_dpre = (cost.interpolate(pre["rows"], pre[k], run[0]) for k in ("target", "draft"))
    extra = cost.interpolate(pre["rows"], pre["rows_logits"], run[0]) if rows_logits and "rows_logits" in pre else 0.0
    return cost.run_speedup(ar_ms(data), tau, t_step, run[1], t_pre, (t_dpre if drafter else 0.0) + extra)


def verdict(data: dict, acc: dict, method: str, s: cost.Shape | None, context: bool = False,
            run: tuple | None = None) -> Verdict | None:
    """The Verdict of head `method` at shape s (None: the context alone); context: the model's tree beside the
    context's steps, as ModelSwitch mixes them (cost.switched); run: (prompt tokens, new tokens) for the whole run's
    speedup too, its target curve read at the run's mean context. None where the calibration lacks this method (or
    the context entry)."""
    data = at_context(data, run[0] + run[1] / 2) if run else data
    t_ar = ar_ms(data)
    if s is None:
        cs = context_steps(data, acc)
        if cs is None:
            return None
        tau, t_step = cs.alone()
        return Verdict(method, shape_name(None), tau, t_step / t_ar, tau * t_ar / t_step, t_step, t_ar,
                       whole_run(data, tau, t_step, run, drafter=False), context=True)
    step = model_step(data, acc, method, s, context)
    if step is None:
        return None
    tau, t_step, c, mixed = step
    whole = whole_run(data, tau, t_step, run, rows_logits=method in STREAM_METHODS)
    return Verdict(method, shape_name(s) + (" + context" if mixed else ""), tau, t_step / t_ar, tau * t_ar / t_step,
                   t_step, t_ar, whole, context=mixed, ceiling=cost.ceiling(c, method, t_ar)[1])


def model_step(data: dict, acc: dict, method: str, s: cost.Shape, context: bool = False) -> tuple | None:
    """(τ, t_step, the method's Costs, whether mixed with the context's steps) of head `method` at shape s; None where
    the calibration lacks this method."""
    if method not in acc.get("heads", {}) or method not in data.get("head", {}):
        return None
    c, ac = costs_of(data, method), cost.Acceptance(acc["heads"][method]["a"])
    tau = 1 + cost.expected_accepted(ac, s)
    t_step = cost.step_ms(c, method, s, cost.intake(c, ac, s, tau))
    cs = context_steps(data, acc, mixed=True) if context else None
    if cs is not None:  # ModelSwitch starts from this calibration (switch_prior): no warm-up
        tau, t_step = with_model(c, method, s, tau, cs, cost.expected_held(ac, s))
    return tau, t_step, c, cs is not None


def speedup(data: dict, acc: dict, method: str, s: cost.Shape, context: bool = False) -> float:
    """verdict(...).speedup without the rest (what a search over the shape grid compares)."""
    tau, t_step, _, _ = model_step(data, acc, method, s, context)
    return tau * ar_ms(data) / t_step

