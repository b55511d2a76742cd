"""The A/B switches as suite options (they were the product's environment variables SPECLENS_GGUF_CODES,
SPECLENS_ONE_CALL and SPECLENS_Q8_PREFETCH / _STREAM / _INTERLEAVE):

    --fast codes=0,one_call=0            the target's FastConfig fields (core/runtime/config.py), its runner rebuilt
    --q8 prefetch=2048,stream=0,interleave=0   q8_mm's tuning (core.kernels.cpu.tuning.set_tuning), set before loading

A suite calls add_switches(parser), then apply_q8(args) before it loads a model and with_target(pipe, args) (or
fast_config(args)) after."""
from dataclasses import fields, replace

from core.errors import SpecError

FAST = ("codes", "one_call")
Q8 = {"prefetch": int, "stream": int, "interleave": bool}


def add_switches(p) -> None:
    p.add_argument("--fast", default="", metavar="codes=0,one_call=0",
                   help="A/B: the target's FastConfig switches (codes: its GGUF codes; one_call: every layer in one call)")
    p.add_argument("--q8", default="", metavar="prefetch=N,stream=N,interleave=0",
                   help="A/B: q8_mm's tuning, set before loading (bytes; -1: the kernels' default)")


def pairs(text: str, kinds: dict, flag: str) -> dict:
    """'a=1,b=0' -> {a: kinds[a]('1'), ...}; an unknown name or a bad value is a SpecError naming the flag."""
    out = {}
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        name, _, value = item.partition("=")
        if name not in kinds or not value:
            raise SpecError(f"{flag} {item!r}: use {', '.join(f'{k}=...' for k in kinds)}")
        try:
            out[name] = value.lower() not in ("0", "false", "off", "no") if kinds[name] is bool else kinds[name](value)
        except ValueError:
            raise SpecError(f"{flag} {item!r}: {value!r} is not a number") from None
    return out


def fast_switches(args) -> dict:
    return pairs(getattr(args, "fast", ""), dict.fromkeys(FAST, bool), "--fast")


def apply_q8(args) -> dict:
    """Set q8_mm's tuning from --q8 (before any model loads: the interleaving is chosen when the weights are packed)."""
    kw = pairs(getattr(args, "q8", ""), Q8, "--q8")
    if kw:
        from core.kernels.cpu.tuning import set_tuning
        set_tuning(**kw)
    return kw


def fast_config(args, base=None):
    """base (default FastConfig()) with the --fast switches."""
    from core.runtime.config import FastConfig
    base = base or FastConfig()
    assert all(f in {x.name for x in fields(base)} for f in FAST)
    return replace(base, **fast_switches(args))


def with_target(pipe, args):
    """pipe itself without --fast; else the same pipeline around a target runner rebuilt with the switches."""
    if not fast_switches(args):
        return pipe
    from core.pipeline import Pipeline
    from core.runtime.fast import make_runner
    fc = getattr(pipe.target, "fast_cfg", None)
    target = make_runner(pipe.model, pipe.tokenizer, "auto", fast_config(args, fc))
    return Pipeline(pipe.model_id, pipe.model, pipe.tokenizer, target, pipe.drafter, pipe.draft_name, pipe.fr_rank,
                    pipe.math_note)
