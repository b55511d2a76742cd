"""Which backend runs a kernel (auto | triton | torch), and the lazy Triton `jit` every kernel file uses.

Triton is imported on the first Triton call, never by `import core.kernels`: triton decorates its
own helpers (tl.zeros, tl.max, ...) for the compiler or the interpreter when it is imported, so an
early import would freeze compiled mode before TRITON_INTERPRET=1 is set. Kernels are therefore
plain functions jitted by `jit`, which also binds the name `tl` they use; their files start with
`from __future__ import annotations` so `BLOCK: tl.constexpr` is read as text until then.
"""
import importlib.util
import os
import sys

import torch

from core.errors import SpecError

BACKENDS = ("auto", "triton", "torch")


def interpreting() -> bool:
    """TRITON_INTERPRET is on (Triton runs kernels on the CPU with numpy, slowly but exactly)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


def triton_installed() -> bool:
    """Without importing it (see above)."""
    return importlib.util.find_spec("triton") is not None


def use_triton(backend: str, device) -> bool:
    """auto: Triton on CUDA, torch elsewhere. triton: Triton, on CPU tensors only under TRITON_INTERPRET=1."""
    if backend not in BACKENDS:
        raise SpecError(f"kernel backend must be one of {'|'.join(BACKENDS)}, got {backend!r}")
    device = torch.device(device)
    if backend == "torch":
        return False
    if backend == "auto":
        return device.type == "cuda" and triton_installed()
    if not triton_installed():
        raise SpecError("backend 'triton' needs the triton package (pip install triton)")
    if device.type != "cuda" and not interpreting():
        raise SpecError(f"backend 'triton' on {device.type} tensors needs TRITON_INTERPRET=1 in the "
                        "environment at start-up; use backend 'torch' or 'auto' instead")
    if interpreting() and not triton_interprets():
        raise SpecError("triton was imported before TRITON_INTERPRET=1 was set; set it at start-up")
    return True


def triton_interprets() -> bool:
    """Triton's own helpers were built for the interpreter (True too when triton is not loaded yet)."""
    language = sys.modules.get("triton.language")
    return language is None or type(language.zeros).__name__ == "InterpretedFunction"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


_JITTED = {}


def jit(fn, gpu_configs: list, interpreter_config: dict, key: list, **autotune_kw):
    """fn as an autotuned Triton kernel, built once per (fn, config set, mode: compiled | interpreted).

    Configs are dicts of constexpr block sizes plus num_warps / num_stages. The interpreter gets
    its single config (autotune then never benchmarks; blocks sized for few Python programs).
    """
    import triton
    import triton.language
    mode = (fn, id(gpu_configs), interpreting())
    if mode not in _JITTED:
        fn.__globals__["tl"] = triton.language  # the kernel files' `tl` (see top)
        chosen = [interpreter_config] if interpreting() else gpu_configs
        _JITTED[mode] = triton.autotune([triton_config(c) for c in chosen], key=key, **autotune_kw)(triton.jit(fn))
    return _JITTED[mode]


def triton_config(c: dict):
    import triton
    meta = {k: v for k, v in c.items() if k not in ("num_warps", "num_stages")}
    return triton.Config(meta, num_warps=c.get("num_warps", 4), num_stages=c.get("num_stages", 2))
