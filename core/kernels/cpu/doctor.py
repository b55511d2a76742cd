"""python -m core doctor [--rebuild] [--json]: what this CPU has, which level and compiler the fused kernels are built
with, whether they loaded (or the compiler's reason and where the failure is remembered), and which variant each
product runs. --rebuild forgets a remembered failure and builds again."""
import argparse
import json
import os
import platform

import torch

from core.kernels.cpu import build, cpu_layer, isa

FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16",
            "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve")  # /proc/cpuinfo's names


def cpuinfo(field: str) -> str:
    try:
        return next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith(field)), "")
    except OSError:
        return ""


def cpu_features() -> list:
    flags = (cpuinfo("flags") or cpuinfo("Features")).split()
    return [f for f in FEATURES if f in flags]


def kernels_state() -> dict:
    """Whether the library loaded, its path or the reason it did not, and the failure record of this key."""
    lvl, cc = build.level(), build.compiler()
    state = {"level": lvl, "compiler": cc, "loaded": cpu_layer.lib() is not None, "reason": cpu_layer.why_not()}
    try:
        so, failed, state["version"] = build.paths(lvl, cc)
        if state["loaded"]:
            state["library"] = str(so)
        elif failed.exists():
            state["record"] = str(failed)
    except build.BuildError as err:
        state["version"] = str(err)
    state["openmp"] = state["loaded"] and not cpu_layer.one_thread()
    return state


def products() -> dict:
    """The variant each product runs here under the cap ('' or 'none': its torch path)."""
    return {"q8_mm (GGUF int8 blocks)": isa.Q8.get(isa.q8_variant(), (0, "torch"))[1],
            "codes_mm (GGUF bf16 codes)": isa.LABELS.get(isa.codes_variant(), "torch"),
            "lowrank_mm (low-rank head)": isa.lowrank_variant() or "torch",
            "int4_mm (int4 draft weights)": "avx512-vnni" if isa.int4_vnni() else "torch",
            "layer ops (rms, rope, attention)": "C" if cpu_layer.lib() is not None else "torch"}


def report() -> dict:
    return {"cpu": cpuinfo("model name") or platform.processor(), "machine": platform.machine(),
            "features": cpu_features(), "threads": torch.get_num_threads(),
            "cap": isa.cap(), "march_env": os.environ.get(build.MARCH, ""), "kernels": kernels_state(),
            "products": products()}


def show(r: dict) -> str:
    k = r["kernels"]
    lines = [f"CPU        {r['cpu']} ({r['machine']}): {' '.join(r['features']) or 'none of the features the kernels use'}",
             f"threads    {r['threads']} (torch)", f"cap        SPECLENS_CPU_ISA={r['cap']}",
             f"build      -march={k['level']} with CC={k['compiler']} ({k.get('version', '')})"]
    if k["loaded"]:
        lines.append(f"kernels    loaded: {k['library']}" + ("" if k["openmp"] else " (no OpenMP: one thread)"))
    else:
        lines.append(f"kernels    {cpu_layer.off_note()}")
        if "record" in k:
            lines.append(f"           failure remembered in {k['record']}; retry: python -m core doctor --rebuild")
    lines.append("products")
    lines += [f"  {name:34s} {variant}" for name, variant in r["products"].items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core doctor", description=__doc__)
    p.add_argument("--rebuild", action="store_true", help="forget a remembered build failure and build again")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.rebuild:
        build.forget()
        isa.reload()
    r = report()
    print(json.dumps(r, indent=1) if args.json else show(r))
    return 0
