"""The choices the cost model makes from this machine's calibration: the draft shape `--shape auto` runs (and whether
with the context), a run's prediction and the app's "Will it pay here?" report, the calibrated start of ModelSwitch,
and which GGUF arithmetic SPECLENS_GGUF_MATH=auto loads.

Without a calibration nothing is guessed: `auto` runs the model's measured shape (core.models.Alias.draft_defaults)
and says so, with the command to run (python -m core calibrate: core/cost/measure.py).
"""
import json
import time
from dataclasses import replace
from pathlib import Path

from core.config import SpecConfig
from core.cost import model as cost
from core.cost.predict import (Verdict, anchored, ar_ms, context_steps, costs_of, mixed_kinds, shape_label, shape_name,
                               shape_of, speedup, verdict)
from core.cost.store import CONTEXT, arithmetic_path, cached, calibration_key, load_json, machine, stamps
from core.decoding.context import SwitchPrior
from core.models import draft_defaults
from core.paths import write_atomic

SHAPE_KEYS = ("shape", "depth", "top_k", "tree_size", "gamma")
MARGIN = 0.05  # auto leaves the default shape only for a predicted gain above this (predictions err by up to ~10%)
PAYS = 1.0  # auto speculates only where its best choice is predicted at least this fast; else plain decoding


# ---------------------------------------------------------------- a run's prediction, the switch's start

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
            s, _ = cost.best_of(cost.shape_grid(), lambda s, ctx=ctx: speedup(data, acc, method, s, ctx))
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


CHOICES: dict = {}  # (the calibration's files as they stand, cfg, flags) -> resolve_shape's answer (~30 ms a search)
KEPT_CHOICES = 256  # the oldest goes first past this: a server's runs of many settings do not grow it without bound


def resolve_shape(pipe, cfg: SpecConfig, allow_context: bool = True, allow_plain: bool = True) -> tuple:
    """(cfg with a concrete shape, one line saying what `auto` chose and why). A cfg not on auto comes back as it is.
    allow_context: with context drafting on, the choices include no model draft at all, and the model alone.
    allow_plain: where no choice is predicted to pay (PAYS), plain decoding (method "ar") instead: a 2-core AVX2-only
    CPU, whose verify rows cost ~0.5 of a step each, ran SmolLM2's best choice, the context alone, at 0.81×."""
    if cfg.shape != "auto":
        return cfg, ""
    if cfg.method == "ar" or pipe.drafter is None:
        return measured_shape(pipe, cfg), ""
    key = (stamps(pipe), repr(cfg), allow_context, allow_plain)
    if key not in CHOICES:
        if len(CHOICES) >= KEPT_CHOICES:
            CHOICES.pop(next(iter(CHOICES)))
        CHOICES[key] = choose_shape(pipe, cfg, allow_context, allow_plain)
    return CHOICES[key]


def measured_shape(pipe, cfg: SpecConfig) -> SpecConfig:
    """cfg at the model's measured shape (core.models.Alias.draft_defaults), else SpecConfig's tree."""
    return replace(cfg, **{k: v for k, v in ({"shape": "tree"} | draft_defaults(pipe.model_id)).items()
                           if k in SHAPE_KEYS})


def choose_shape(pipe, cfg: SpecConfig, allow_context: bool, allow_plain: bool) -> tuple:
    """resolve_shape's search on this machine's calibration."""
    fallback = measured_shape(pipe, cfg)
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
    if allow_plain and max(v.speedup, home.speedup if home else 0.0) < PAYS:
        return replace(fallback, method="ar"), plain_note(v)
    if home is not None and v.speedup < home.speedup * (1 + MARGIN):
        return replace(fallback, context=context_of(home)), (
            f"auto: the default shape {home.shape}{off(home)}, predicted {home.speedup:.2f}× plain decoding on this machine "
            f"(the grid's best, {v.shape} at {v.speedup:.2f}×, is within the cost model's {MARGIN:.0%} margin)")
    chosen = replace(cfg, shape=CONTEXT) if s is None else replace(cfg, context=context_of(v), **s.config())
    return chosen, (f"auto: {v.shape}{off(v)}, predicted "
                    f"{v.speedup:.2f}× plain decoding on this machine (τ {v.tau:.2f} against a break-even τ of "
                    f"{v.break_even_tau:.2f}; the default shape {home.shape if home else shape_label(fallback)} "
                    f"{home.speedup if home else 0:.2f}×)")


def plain_note(v: Verdict) -> str:
    return (f"auto: plain decoding, as no draft is predicted to pay on this machine (the best, {v.shape}, "
            f"{v.speedup:.2f}× plain decoding: τ {v.tau:.2f} against a break-even τ of {v.break_even_tau:.2f}); "
            "pick a shape to watch the drafts anyway")


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


# ---------------------------------------------------------------- the GGUF arithmetic SPECLENS_GGUF_MATH=auto loads
# Where both run, a GGUF model multiplies in its bf16 codes (the model's own bf16 weights, bit for bit; on AMX their
# extra verify rows cost next to nothing) or its int8 blocks (llama.cpp's int8 activations; the cheaper 1-row step,
# but each verify row costs about a tenth of a step: docs/runtime.md). Which one is faster depends on the machine and
# on whether speculation pays: on the 2-core AMX Xeon the 1.5B's plain decoding ran 10.7 tok/s on its bf16 codes and
# 17.1 on its int8 blocks, and their best speculative choices 16.7-18.4 and 19.2 tok/s (docs/cost.md). So `python -m
# core calibrate` records each arithmetic's predicted plain and best tokens per second for the pipeline it calibrates,
# and once both are recorded for this machine, model pair and dtype, a pipeline loads the faster one. Until then auto
# keeps its rule (core.runtime.weights.codes_math). The two round differently, so their greedy texts may differ;
# every run is identical to the plain decoding of its own arithmetic.

ARITHMETIC_METHOD = "nanospec"  # the head whose auto choice (context on) stands for an arithmetic's speculation


def pipeline_math(pipe) -> str:
    """The GGUF arithmetic a pipeline's target runs: 'bf16' where any matrix multiplies by its bf16 codes, 'int8'
    where they all run on int8 blocks (SmolLM2's Q4_1 / Q8_0 have no bf16 codes), '' without GGUF products."""
    from core.runtime.weights import labels_math
    target = pipe.target
    return labels_math(target.codes_variant) if getattr(target, "on_codes", False) else ""


def arithmetic_speeds(data: dict, acc: dict | None) -> dict:
    """An arithmetic's predicted tokens per second from its calibration: plain decoding, and auto's best choice for
    ARITHMETIC_METHOD with context drafting on (the model's tree, the context alone or both), with that choice's name."""
    plain = 1000 / ar_ms(data)
    out = {"plain_tok_s": round(plain, 2), "best_tok_s": round(plain, 2), "best": "plain decoding"}
    _, best = best_choice(data, acc, ARITHMETIC_METHOD, True) if acc else (None, None)
    if best is not None and best.speedup > 1:
        out |= {"best_tok_s": round(plain * best.speedup, 2), "best": best.shape}
    return out


def recorded_arithmetics(path: Path) -> dict:
    """The arithmetics' speeds recorded at path ({} where none)."""
    return load_json(path) or {}


def record_arithmetic(pipe, data: dict, acc: dict | None) -> Path | None:
    """Writes this pipeline's arithmetic's speeds beside the other's (None where the target runs no GGUF products)."""
    math = pipeline_math(pipe)
    if not math:
        return None
    path = arithmetic_path(pipe.model_id, pipe.draft_name, str(pipe.model.dtype).removeprefix("torch."))
    got = recorded_arithmetics(path)
    got[math] = arithmetic_speeds(data, acc) | {"date": time.strftime("%Y-%m-%d")}
    write_atomic(path, json.dumps(got, indent=1))
    return path


def chosen_arithmetic(model_id: str, draft: str, dtype: str, rule: str) -> tuple:
    """(the arithmetic to load, a note saying why) where both are recorded: auto's rule unless the other is predicted
    faster by more than the cost model's margin (its predictions err by up to ~10%); ("", "") where not both are."""
    got = recorded_arithmetics(arithmetic_path(model_id, draft, dtype))
    if not {"bf16", "int8"} <= got.keys() or rule not in got:
        return "", ""
    other = "int8" if rule == "bf16" else "bf16"
    fast = other if got[other]["best_tok_s"] > got[rule]["best_tok_s"] * (1 + MARGIN) else rule
    slow = other if fast == rule else rule
    note = (f"GGUF arithmetic {fast} by calibration: {got[fast]['best_tok_s']:.1f} tok/s predicted "
            f"({got[fast]['best']}) against {got[slow]['best_tok_s']:.1f} in {slow} ({got[slow]['best']})")
    return fast, note
