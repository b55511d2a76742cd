"""A calibration's files: where this machine's measured step costs, a model pair's acceptance table and both GGUF
arithmetics' predicted speeds are kept, and what they are keyed by (another machine, model pair, runtime, dtype,
kernels' code or way of measuring is another file: a stale file is never read).

python -m core calibrate (core/cost/measure.py) writes them; core/cost/predict.py and core/cost/choose.py read them.
The formats and paths on disk are the users' caches: a change to them must make the old files stale (MEASURES).
"""
import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from core.models import model_alias
from core.paths import ASSETS, cache_root

CPU_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma", "asimd", "sve")
CONTEXT = "context"  # the acceptance table's and the costs' entry for drafting from the context alone
CONTEXT_ONE = "context_one"  # the costs' entry for the 1-row steps of a context run (CONTEXT: its continued steps)
MIXED = "mixed"  # the costs' entry for steps beside the context: {"model": ms over the head's own, CONTEXT, CONTEXT_ONE}


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


def arithmetic_path(model_id: str, draft: str, dtype: str) -> Path:
    """The record of both GGUF arithmetics' predicted speeds for this machine, model pair and dtype
    (core/cost/choose.py: record_arithmetic)."""
    from core.runtime.fast import kernels_id
    key = {"machine": machine(), "model": model_id, "draft": draft, "dtype": dtype, "kernels": kernels_id(),
           "measures": MEASURES}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "calibration" / f"{model_id.replace('/', '--')}-arithmetic-{digest}.json"


def load_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cached(pipe) -> tuple:
    """(costs, acceptance) saved for this pipeline on this machine, each None where missing."""
    return load_json(costs_path(calibration_key(pipe))), load_json(acceptance_path(pipe))


def stamps(pipe) -> tuple:
    """The files cached(pipe) reads and their modification times (None where missing): a choice made from them holds
    while these do."""
    paths = (costs_path(calibration_key(pipe)), acceptance_path(pipe))
    return tuple((p, p.stat().st_mtime_ns if p.exists() else None) for p in paths)
