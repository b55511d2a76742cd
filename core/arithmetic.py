"""Which arithmetic a GGUF model multiplies in, where both run: its bf16 codes (the model's own bf16 weights, bit for
bit; on AMX their extra verify rows cost next to nothing) or its int8 blocks (llama.cpp's int8 activations; the
cheaper 1-row step, but each verify row costs about a tenth of a step: docs/runtime.md).

Which one is faster depends on the machine and on whether speculation pays: on the 2-core AMX Xeon the 1.5B's plain
decoding ran 10.7 tok/s on its bf16 codes and 17.1 on its int8 blocks, and their best speculative choices 16.7-18.4
and 19.2 tok/s (docs/cost.md). So `SPECLENS_GGUF_MATH=auto` takes the calibrated choice: `python -m core calibrate`
records each arithmetic's predicted plain and best tokens per second for the pipeline it calibrates, and once both are
recorded for this machine, model pair and dtype, a pipeline loads the faster one. Until then auto keeps its rule
(core.runtime.weights.codes_math). The two round differently, so their greedy texts may differ; every run is identical
to the plain decoding of its own arithmetic.
"""
import hashlib
import json
import time
from pathlib import Path

from core.paths import cache_root, write_atomic

METHOD = "nanospec"  # the head whose auto choice (context on) stands for an arithmetic's speculation


def pipeline_math(pipe) -> str:
    """The GGUF arithmetic a pipeline's target runs: 'bf16' where any matrix multiplies by its bf16 codes, 'int8'
    where they all run on int8 blocks (SmolLM2's Q4_1 / Q8_0 have no bf16 codes), '' without GGUF products."""
    from core.runtime.weights import labels_math
    target = pipe.target
    return labels_math(target.codes_variant) if getattr(target, "on_codes", False) else ""


def choice_path(model_id: str, draft: str, dtype: str) -> Path:
    """The record of both arithmetics' predicted speeds for this machine, model pair and dtype."""
    from core.calibration import MEASURES, machine
    from core.runtime.fast import kernels_id
    key = {"machine": machine(), "model": model_id, "draft": draft, "dtype": dtype, "kernels": kernels_id(),
           "measures": MEASURES}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "calibration" / f"{model_id.replace('/', '--')}-arithmetic-{digest}.json"


def speeds(data: dict, acc: dict | None) -> dict:
    """An arithmetic's predicted tokens per second from its calibration: plain decoding, and auto's best choice for
    METHOD with context drafting on (the model's tree, the context alone or both), with that choice's name."""
    from core.calibration import ar_ms, best_choice
    plain = 1000 / ar_ms(data)
    out = {"plain_tok_s": round(plain, 2), "best_tok_s": round(plain, 2), "best": "plain decoding"}
    _, best = best_choice(data, acc, METHOD, True) if acc else (None, None)
    if best is not None and best.speedup > 1:
        out |= {"best_tok_s": round(plain * best.speedup, 2), "best": best.shape}
    return out


def record(pipe, data: dict, acc: dict | None) -> Path | None:
    """Writes this pipeline's arithmetic's speeds beside the other's (None where the target runs no GGUF products)."""
    math = pipeline_math(pipe)
    if not math:
        return None
    path = choice_path(pipe.model_id, pipe.draft_name, str(pipe.model.dtype).removeprefix("torch."))
    got = load(path)
    got[math] = speeds(data, acc) | {"date": time.strftime("%Y-%m-%d")}
    write_atomic(path, json.dumps(got, indent=1))
    return path


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def chosen(model_id: str, draft: str, dtype: str, rule: str) -> tuple:
    """(the arithmetic to load, a note saying why) where both are recorded: auto's rule unless the other is predicted
    faster by more than the cost model's margin (its predictions err by up to ~10%); ("", "") where not both are."""
    from core.calibration import MARGIN
    got = load(choice_path(model_id, draft, dtype))
    if not {"bf16", "int8"} <= got.keys() or rule not in got:
        return "", ""
    other = "int8" if rule == "bf16" else "bf16"
    fast = other if got[other]["best_tok_s"] > got[rule]["best_tok_s"] * (1 + MARGIN) else rule
    slow = other if fast == rule else rule
    note = (f"GGUF arithmetic {fast} by calibration: {got[fast]['best_tok_s']:.1f} tok/s predicted "
            f"({got[fast]['best']}) against {got[slow]['best_tok_s']:.1f} in {slow} ({got[slow]['best']})")
    return fast, note
