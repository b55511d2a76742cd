"""A calibration's home: where this machine's measured step costs and a model pair's acceptance table are kept, what
the cost model (core/decoding/cost.py) predicts from them, and the draft shape `--shape auto` runs.

python -m core calibrate (core/experiments/calibrate.py) measures and writes them; the pipeline, the command line,
the benchmarks and the app read them here. Without a calibration nothing is guessed: `auto` runs the model's measured
shape (core.models.Alias.draft_defaults) and says so.
"""
import hashlib
import json
import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from core.config import SpecConfig
from core.decoding import cost
from core.decoding.context import SwitchPrior
from core.decoding.heads import STREAM_METHODS
from core.decoding.tree import tree_shape
from core.models import draft_defaults, model_alias
from core.paths import ASSETS, cache_root

CPU_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma", "asimd", "sve")
SHAPE_KEYS = ("shape", "depth", "top_k", "tree_size", "gamma")
CONTEXT = "context"  # the acceptance table's and the costs' entry for drafting from the context alone
CONTEXT_ONE = "context_one"  # the costs' entry for the 1-row steps of a context run (CONTEXT: its continued steps)
MIXED = "mixed"  # the costs' entry for steps beside the context: {"model": ms over the head's own, CONTEXT, CONTEXT_ONE}
MARGIN = 0.05  # auto leaves the default shape only for a predicted gain above this (predictions err by up to ~10%)


# ---------------------------------------------------------------- where a calibration belongs

def machine() -> dict:
    """The CPU, the features the kernels dispatch on, the torch threads and the ISA cap in force."""
    flags, name = set(), platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")) and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": name, "features": [f for f in CPU_FLAGS if f in flags], "threads": torch.get_num_threads(),
            "isa_cap": os.environ.get("SPECLENS_CPU_ISA", ""), "cores": os.cpu_count()}


MEASURES = 10  # how `calibrate` measures (a new value makes every cache stale); 2: each step's overhead from its
#               wall time, each verify point timed in a row of its own passes; 3: the mixed steps' overheads and the
#               draft's scale; 4: a context run's 1-row and continued steps' bookkeeping apart, over two prompts;
#               5: the verify curve timed from the most rows down; 6: past 17 rows every 4th, linear between;
#               7: each head's steps over the two step prompts (one prompt's ~7 steps of the pair swung by 50 ms);
#               8: plain decoding's bookkeeping against its own steps' target passes; 9: every kind's (step_rest);
#               10: the prefill's root row's logits alone, the other rows' apart; intakes less the drafts kept


def calibration_key(pipe) -> dict:
    """What a calibration's costs depend on: the machine, the model pair, the runtime and dtype, the kernels' code,
    how they are measured."""
    from core.runtime.fast import kernels_id
    return {"machine": machine(), "model": pipe.model_id, "draft": pipe.draft_name, "runtime": pipe.runtime_name,
            "runtime_note": getattr(pipe, "products_note", getattr(pipe, "runtime_note", "")), "dtype": str(pipe.model.dtype).removeprefix("torch."),
            "kernels": kernels_id(), "measures": MEASURES}


def costs_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "calibration" / f"{key['model'].replace('/', '--')}-{digest}.json"


def acceptance_path(pipe) -> Path:
    name = model_alias(pipe.model_id) or str(pipe.model_id).replace("/", "--")
    return ASSETS / "acceptance" / f"{name}__{pipe.draft_name.replace('/', '--')}.json"


def load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cached(pipe) -> tuple:
    """(costs, acceptance) saved for this pipeline on this machine, each None where missing."""
    return load_json(costs_path(calibration_key(pipe))), load_json(acceptance_path(pipe))


# ---------------------------------------------------------------- what they predict

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
    """The shape a config runs, as the cost model names it ("tree 4/2/8", "chain 3", "context alone")."""
    return shape_name(shape_of(cfg))


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
    """data read at the moment of a probe (core/experiments/calibrate.py: probe) instead of the calibration's: the
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
    if method not in acc.get("heads", {}) or method not in data.get("head", {}):
        return None
    c, ac = costs_of(data, method), cost.Acceptance(acc["heads"][method]["a"])
    tau = 1 + cost.expected_accepted(ac, s)
    t_step, name = cost.step_ms(c, method, s, cost.intake(c, ac, s, tau)), shape_name(s)
    cs = context_steps(data, acc, mixed=True) if context else None
    if cs is not None:  # ModelSwitch starts from this calibration (switch_prior): no warm-up
        tau, t_step = with_model(c, method, s, tau, cs, cost.expected_held(ac, s))
        name += " + context"
    whole = whole_run(data, tau, t_step, run, rows_logits=method in STREAM_METHODS)
    return Verdict(method, name, tau, t_step / t_ar, tau * t_ar / t_step, t_step, t_ar, whole, context=cs is not None,
                   ceiling=cost.ceiling(c, method, t_ar)[1])


def prediction(pipe, cfg: SpecConfig, prompt_tokens: float | None = None, probe: dict | None = None) -> dict:
    """The cost model's numbers for one run's config, from the cached calibration (no measuring here):
    predicted_speedup is the whole run's (a prompt of prompt_tokens, cfg.max_new_tokens new ones) where the
    calibration has prefill curves and prompt_tokens is given, else the steady state's; probe: its curves read at
    that probe's moment (anchored)."""
    cfg = resolve_shape(pipe, cfg)[0]
    data, acc = cached(pipe)
    data = anchored(data, probe) if data else data
    run = (prompt_tokens, cfg.max_new_tokens) if prompt_tokens else None
    v = verdict(data, acc, cfg.method, shape_of(cfg), cfg.context == "on", run) if data and acc else None
    if v is None:
        missing = "python -m core calibrate" + ("" if acc else " --acceptance")
        return {"predicted_speedup": None, "prediction_note": f"no calibration for this machine and model ({missing})"}
    whole = v.run_speedup is not None
    return {"predicted_speedup": round(v.run_speedup if whole else v.speedup, 3), "predicted_step_speedup":
            round(v.speedup, 3), "predicted_tau": round(v.tau, 3), "break_even_tau": round(v.break_even_tau, 3),
            "predicted_step_ms": round(v.t_step_ms, 2), "predicted_ar_ms": round(v.t_ar_ms, 2),
            "prediction_note": "" if whole or not prompt_tokens else
            "steady state (no prefill curves in this calibration: python -m core calibrate --force measures them)"}


def switch_prior(pipe, cfg: SpecConfig) -> SwitchPrior | None:
    """The calibrated costs ModelSwitch starts a run from where cfg drafts the model's tree beside the context (None
    where the calibration lacks this machine, method or the context entry)."""
    data, acc = cached(pipe)
    s = shape_of(cfg)
    if cfg.context != "on" or s is None or not data or not acc or cfg.method not in acc.get("heads", {}) \
            or cfg.method not in data.get("head", {}):
        return None
    cs = context_steps(data, acc, mixed=True)
    if cs is None:
        return None
    c = costs_of(data, cfg.method)
    ac = cost.Acceptance(acc["heads"][cfg.method]["a"])
    tau_m = 1 + cost.expected_accepted(ac, s)
    plain, model, ctx, both = mixed_kinds(c, cfg.method, s, tau_m, cs, cost.expected_held(ac, s))
    return SwitchPrior(ms=((plain[1], model[1]), (ctx[1], both[1])), model_tokens=(model[0] - 1, both[0] - ctx[0]))


# ---------------------------------------------------------------- --shape auto

def best_choice(data: dict, acc: dict, method: str, context: bool, allow_alone: bool = True) -> tuple:
    """(shape or None for the context alone, its Verdict): the model's tree or chain over cost.shape_grid of highest
    predicted speedup (with context drafting on: mixed with the context's steps); with context on and allow_alone,
    auto's whole choice: the model with the context, the model alone (Verdict.context False) or the context alone,
    whichever is predicted fastest. (None, None) where the calibration lacks this method."""
    best = (None, None)
    if method in acc.get("heads", {}) and method in data.get("head", {}):
        for ctx in (context, False) if context and allow_alone else (context,):
            s, _ = cost.best_of(cost.shape_grid(), lambda s, ctx=ctx: verdict(data, acc, method, s, ctx).speedup)
            v = verdict(data, acc, method, s, ctx)
            if best[1] is None or v.speedup > best[1].speedup:
                best = (s, v)
    alone = verdict(data, acc, method, None) if context and allow_alone else None
    if alone is not None and (best[1] is None or alone.speedup >= best[1].speedup):
        return None, alone
    return best


def home_verdict(data: dict, acc: dict, method: str, s: cost.Shape, context: bool, allow_off: bool):
    """The default shape's Verdict: with context on and allow_off, the better of it with the context and without."""
    home = verdict(data, acc, method, s, context)
    off = verdict(data, acc, method, s, False) if context and allow_off else None
    return off if home is None or (off is not None and off.speedup > home.speedup) else home


def resolve_shape(pipe, cfg: SpecConfig, allow_context: bool = True) -> tuple:
    """(cfg with a concrete shape, one line saying what `auto` chose and why). A cfg not on auto comes back as it is.
    allow_context: with context drafting on, the choices include no model draft at all, and the model alone."""
    if cfg.shape != "auto":
        return cfg, ""
    fallback = replace(cfg, **{k: v for k, v in ({"shape": "tree"} | draft_defaults(pipe.model_id)).items()
                               if k in SHAPE_KEYS})
    if cfg.method == "ar" or pipe.drafter is None:
        return fallback, ""
    data, acc = cached(pipe)
    on = cfg.context == "on"
    s, v = best_choice(data, acc, cfg.method, on, allow_context) if data and acc else (None, None)
    if v is None:
        missing = "python -m core calibrate" + ("" if acc else " --acceptance")
        return fallback, (f"auto: no calibration for this machine and model ({missing}); "
                          f"the model's measured shape {shape_name(shape_of(fallback))}")
    home = home_verdict(data, acc, cfg.method, shape_of(fallback), on, allow_context)
    modelled = on and context_steps(data, acc) is not None  # else the verdicts leave the user's setting as it is

    def context_of(v: Verdict) -> str:
        return ("on" if v.context else "off") if modelled else cfg.context

    def off(v: Verdict) -> str:
        return "" if context_of(v) == cfg.context else ", context drafting off (predicted faster without it)"
    if home is not None and v.speedup < home.speedup * (1 + MARGIN):
        return replace(fallback, context=context_of(home)), (
            f"auto: the default shape {home.shape}{off(home)}, predicted {home.speedup:.2f}× plain decoding on this machine "
            f"(the grid's best, {v.shape} at {v.speedup:.2f}×, is within the cost model's {MARGIN:.0%} margin)")
    chosen = replace(cfg, shape=CONTEXT) if s is None else replace(cfg, context=context_of(v), **s.config())
    return chosen, (f"auto: {v.shape}{off(v)}, predicted "
                    f"{v.speedup:.2f}× plain decoding on this machine (τ {v.tau:.2f} against a break-even τ of "
                    f"{v.break_even_tau:.2f}; the default shape {home.shape if home else shape_label(fallback)} "
                    f"{home.speedup if home else 0:.2f}×)")


# ---------------------------------------------------------------- will it pay here? (what the app's panel shows)

COST_ROWS = (1, 2, 4, 8, 16, 32)  # verify row counts the report quotes


def report(pipe, cfg: SpecConfig, note: str = "", prompt_tokens: int | None = None, probe: dict | None = None) -> dict:
    """This machine's measured costs and the cost model's verdicts for a run's config (cfg with its shape resolved):
    the run's own (with its whole run's speedup for a prompt of prompt_tokens), each head's best shape, the context
    alone; probe: all of them read at that probe's moment (anchored; "anchored" says so). JSON-ready; "missing" says
    what to run where the calibration or the acceptance table is not there."""
    data, acc = cached(pipe)
    out = {"shape": shape_label(cfg), "shape_note": note, "method": cfg.method}
    if not data or not acc:
        out["missing"] = "python -m core calibrate" + ("" if acc else " --acceptance")
        out["machine"] = machine()
        return out
    data = anchored(data, probe)
    out["anchored"] = probe is not None
    v = data["verify"]
    key = data.get("key") or calibration_key(pipe)
    out |= {"machine": key["machine"], "date": data.get("date", ""), "runtime_note": key["runtime_note"],
            "costs": {"verify": {str(n): round(v[n - 1], 2) for n in COST_ROWS if n <= len(v)},
                      "backbone": round(data["backbone"][0], 2),
                      "head": {m: round(h[0], 2) for m, h in data["head"].items()}}}
    on = cfg.context == "on"
    whole = (prompt_tokens, cfg.max_new_tokens) if prompt_tokens else None
    run = verdict(data, acc, cfg.method, shape_of(cfg), on, whole) if cfg.method != "ar" else None
    out["run"] = run.as_dict() if run else None
    out["methods"] = [best.as_dict() for m in acc.get("heads", {})
                      for _, best in [best_choice(data, acc, m, on, allow_alone=False)] if best is not None]
    ctx = verdict(data, acc, cfg.method, None)
    out["context"] = ctx.as_dict() if ctx else None
    return out
