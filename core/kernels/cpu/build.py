"""How the fused CPU kernels' library is built: for one x86 level named on purpose, with the compiler CC names,
and a failed build remembered on disk so that no later process pays for it again.

    level()    the -march the library is built for: SPECLENS_MARCH, else the build SPECLENS_CPU_ISA's cap stands
               for (avx2: x86-64-v3, what an AVX2-only CPU builds; none: x86-64-v2, a pre-AVX2 CPU), else native
    library()  the cached .so for level() and compiler(); BuildError (the compiler's first error line) where it fails
    record()   where a failed build of this key is remembered: delete it (or `python -m core doctor --rebuild`) to retry

Every ISA variant's functions carry complete target attributes and are chosen at run time from CPUID (kernels.h: one
scheme for every product), so one source builds at every level; a level only decides what the compiler may assume for
the portable code around them.
"""
import hashlib
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

from core.errors import SpecError

HERE = Path(__file__).parent
SOURCES = [HERE / f for f in ("layer_ops.c", "int4_mm.c", "codes_mm.c", "codes_mm_avx.c", "q8_mm.c", "layers_q8.c",
                               "lowrank_mm.c")]
HEADERS = [HERE / f for f in ("kernels.h", "q8_dot.h", "q8_amx.h")]
LEVELS = ("native", "x86-64-v4", "x86-64-v3", "x86-64-v2")
CAP_LEVELS = {"avx2": "x86-64-v3", "none": "x86-64-v2"}  # the cap's variants are what these levels' CPUs have
MARCH = "SPECLENS_MARCH"
ORDER = ("amx", "avx512", "avxvnni", "avx2", "none")  # the variants' caps, best first (isa.py)
ENV = "SPECLENS_CPU_ISA"
FLAGS = ["-O3", "-Wno-psabi", "-shared", "-fPIC"]


class BuildError(Exception):
    """The library could not be built: str() names the compiler and its first error line."""


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def level() -> str:
    """SPECLENS_MARCH, else the level SPECLENS_CPU_ISA's cap stands for, else native (always native off x86)."""
    named = os.environ.get(MARCH, "").strip().lower()
    if named and named not in LEVELS:
        raise SpecError(f"{MARCH}={named!r}: use one of {', '.join(LEVELS)}")
    if named and named != "native" and not is_x86():
        raise SpecError(f"{MARCH}={named}: an x86 level, and this CPU is {platform.machine()}")
    cap = os.environ.get(ENV, "").strip().lower()
    return named or (CAP_LEVELS.get(cap, "native") if is_x86() else "native")


def cap() -> str:
    """SPECLENS_CPU_ISA, else the cap SPECLENS_MARCH's level stands for (x86-64-v3: avx2, x86-64-v2: none), else amx
    (no cap); SpecError for another value. The cap also picks the library's build level (level())."""
    march = os.environ.get(MARCH, "").strip().lower()
    implied = {lvl: c for c, lvl in CAP_LEVELS.items()}.get(march, "amx")
    value = os.environ.get(ENV, "").strip().lower() or implied
    if value not in ORDER:
        raise SpecError(f"{ENV}={value!r}: use one of {', '.join(ORDER)}")
    return value


def allowed(variant: str) -> bool:
    """Whether the cap lets `variant` run (it may still be missing here: isa.py says which run)."""
    return ORDER.index(variant) >= ORDER.index(cap())


def compiler() -> str:
    return os.environ.get("CC", "").strip() or "cc"


def cache_dir() -> Path:
    from core.paths import cache_root
    return cache_root() / "kernels"


def cpu_id() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "".join(next((line for line in lines if line.startswith(k)), "") for k in ("model name", "flags"))
    except OSError:
        return platform.processor()


def sources_digest() -> bytes:
    return b"".join(f.read_bytes() for f in SOURCES + HEADERS)


def version(cc: str) -> str:
    """`cc --version`'s first line; BuildError where the compiler is not there."""
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(f"no C compiler: CC={cc!r} could not run ({err.__class__.__name__})") from err
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else ""


def key(lvl: str, cc: str, ver: str) -> str:
    """One library per source, compiler, CPU and level."""
    return hashlib.sha256(sources_digest() + f"{cc}\n{ver}\n{lvl}\n".encode() + cpu_id().encode()).hexdigest()[:16]


def paths(lvl: str | None = None, cc: str | None = None) -> tuple:
    """(library, failure record, compiler version) of (level, compiler) on this CPU and source: one key names both."""
    lvl, cc = lvl or level(), cc or compiler()
    ver = version(cc)
    so = cache_dir() / f"cpu_layer-{key(lvl, cc, ver)}.so"
    return so, so.with_name(so.stem + ".failed.json"), ver


def record(lvl: str | None = None, cc: str | None = None) -> Path:
    """Where a failed build of (level, compiler) on this CPU and source is remembered."""
    return paths(lvl, cc)[1]


def library(lvl: str | None = None, cc: str | None = None) -> Path:
    """The library built for `lvl` by `cc` (default: level(), compiler()), from the cache when it is there; a failure
    recorded for the same key raises at once with the compiler's reason."""
    lvl, cc = lvl or level(), cc or compiler()
    out, failed, ver = paths(lvl, cc)
    if out.exists():
        return out
    if failed.exists():
        raise BuildError(json.loads(failed.read_text())["reason"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        so = Path(tmp) / out.name
        try:
            compile_so(cc, so, lvl)
        except BuildError as err:
            remember(failed, str(err), cc, ver, lvl)
            raise
        os.replace(so, out)
    return out


def compile_so(cc: str, so: Path, lvl: str = "native", sources: list = SOURCES) -> None:
    """-O3 -march=lvl with OpenMP for the GEMM kernels' threads; without it (one thread) where the compiler has none.
    BuildError with the compiler's first error line where neither builds."""
    base = [cc, *FLAGS, f"-march={lvl}", "-o", str(so), *map(str, sources), "-lm"]
    for cmd in (base[:1] + ["-fopenmp"] + base[1:], base):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as err:
            raise BuildError(f"{cc} -march={lvl}: {err.__class__.__name__}") from err
        if done.returncode == 0:
            return
    raise BuildError(f"{cc} -march={lvl} failed: {first_error(done.stderr) or f'exit status {done.returncode}'}")


def first_error(stderr: str) -> str:
    """The compiler's first line that says error (else its first line), shortened to one readable line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    line = next((s for s in lines if "error" in s.lower()), lines[0] if lines else "")
    if ": error: " in line:
        where, what = line.split(": error: ", 1)
        line = f"{Path(where.split(':')[0]).name}:{':'.join(where.split(':')[1:2])}: {what}"
    return line[:240]


def remember(path: Path, reason: str, cc: str, ver: str, lvl: str) -> None:
    from core.paths import write_atomic
    write_atomic(path, json.dumps({"reason": reason, "compiler": cc, "version": ver, "level": lvl}, indent=1))


def forget(lvl: str | None = None, cc: str | None = None) -> bool:
    """Remove the failure record of (level, compiler), so that the next process builds again; whether one was there."""
    try:
        path = record(lvl, cc)
    except BuildError:
        return False
    if path.exists():
        path.unlink()
        return True
    return False
