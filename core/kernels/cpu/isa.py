"""Which CPU kernel variant runs: the best this CPU has, capped by SPECLENS_CPU_ISA=amx|avx512|avx2|none.

- amx     codes_mm on AMX-BF16 tiles (codes_mm.c); q8_mm's Q4_K / Q6_K dots of 6+ rows (AMX_ROWS) on AMX-INT8 tiles (the
          AVX-512 variant's floats: q8_amx.h)
- avx512  codes_mm_avx on AVX512-BF16 `vdpbf16ps` (codes_mm_avx.c); int4_mm on AVX512-VNNI (int4_mm.c)
          q8_mm's integer dots on AVX512-VNNI (`vpdpwssd` / `vpdpbusd`)
- avxvnni q8_mm on AVX-VNNI (the same VNNI dots, VEX-encoded: Intel laptops since Alder Lake); codes as avx2
- avx2    codes_mm_avx on AVX2 + FMA (fp32 sums of the same bf16 weights); q8_mm (q8_mm.c: int8 activations on the
          raw GGUF blocks, llama.cpp's arithmetic), which SPECLENS_GGUF_MATH=auto picks where avx2 is the best variant
- none    the portable torch path (what a CPU without them, e.g. an ARM Mac, gets)
lowrank_mm (a low-rank head over the whole vocabulary, lowrank_mm.c) runs on avx512 (AVX-512) or avx2 (AVX2 + FMA),
the same floats on both. Each product's *_isa() bitmask says which of its variants this CPU runs, whatever level the
library was built for (kernels.h). The cap lets one machine run and test every variant below its best one, on the
library an older CPU builds: avx2 loads the x86-64-v3 build, none the x86-64-v2 one (build.py).
"""
import functools

from core.kernels.cpu import cpu_layer
from core.kernels.cpu.build import ENV, ORDER, allowed, cap  # noqa: F401  (the cap, read here by its users)

LABELS = {"amx": "amx-bf16", "avx512": "avx512-bf16", "avx2": "avx2-fma", "none": "torch"}  # codes_mm's
Q8 = {"amx": (3, "amx-int8"), "avx512": (2, "avx512-vnni-int8"), "avxvnni": (1, "avx-vnni-int8"),
      "avx2": (0, "avx2-int8")}  # q8_mm's variants: id, label


@functools.cache
def codes_variants() -> tuple:
    """The codes_mm variants this CPU and build run, best first ("none" always)."""
    lib = cpu_layer.lib()
    bits = lib.codes_isa() if lib is not None else 0
    have = {"amx": cpu_layer.amx_ok(), "avx512": bool(bits & 2), "avx2": bool(bits & 1), "none": True}
    return tuple(v for v in ORDER if have.get(v))


@functools.cache
def q8_variants() -> tuple:
    """The q8_mm variants this CPU and build run, best first (none where it lacks AVX2 + FMA)."""
    lib = cpu_layer.lib()
    bits = lib.q8_isa() if lib is not None else 0
    return tuple(v for v, (i, _) in Q8.items() if bits >> i & 1)


def q8_variant() -> str:
    """The q8_mm variant that runs: the best one here that the cap allows ("" where none runs)."""
    return next((v for v in q8_variants() if allowed(v)), "")


def codes_variant() -> str:
    """The codes_mm variant that runs: the best one here that the cap allows ("none": no codes products)."""
    return next(v for v in codes_variants() if allowed(v))


def int4_vnni() -> bool:
    """Whether int4_mm (AVX512-VNNI) runs: the cap allows avx512, and this CPU has it."""
    return allowed("avx512") and cpu_layer.int4_available()


LOWRANK = {"avx512": 2, "avx2": 1}  # lowrank_mm's variants: isa id


@functools.cache
def lowrank_variants() -> tuple:
    """The lowrank_mm variants this CPU and build run, best first."""
    lib = cpu_layer.lib()
    bits = lib.lowrank_isa() if lib is not None else 0
    return tuple(v for v, i in LOWRANK.items() if bits >> (i - 1) & 1)


def lowrank_variant() -> str:
    """The lowrank_mm variant that runs: the best one here that the cap allows ("": the torch product)."""
    return next((v for v in lowrank_variants() if allowed(v)), "")


def reload() -> None:
    """Forget the loaded library and what was read from it, so that the next call builds or loads for the
    environment as it is now (SPECLENS_CPU_KERNELS, SPECLENS_MARCH, SPECLENS_CPU_ISA, CC)."""
    for f in (cpu_layer.lib, cpu_layer.amx_ok, codes_variants, q8_variants, lowrank_variants):
        f.cache_clear()
