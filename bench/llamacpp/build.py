"""llama.cpp as a benchmark peer, never a runtime dependency: built from the vendored tree of the llama-cpp-python source
package (cmake + ninja, Release, only the tools compared with) into the cache root, resumable, logged.

Three flavours: `native` (every feature of this CPU: its AMX / AVX-512 kernels), `avx512` (AVX-512 with VNNI, VBMI and
BF16, no AMX: the build an AVX-512 CPU without AMX runs, e.g. Zen 4), the peer of our runs under SPECLENS_CPU_ISA=avx512,
and `avx2` (AVX2 + FMA + F16C only, no AVX-512, AVX-VNNI or AMX), the peer under SPECLENS_CPU_ISA=avx2: `peer_flavor()`
picks the one the cap asks for, so a capped benchmark compares like with like on one machine."""
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from core.errors import SpecError
from core.paths import cache_root

VERSION = "0.3.36"  # llama-cpp-python sdist whose vendored llama.cpp is built


TOOLS = ("llama-bench", "llama-completion", "llama-speculative-simple")


CMAKE_FLAGS = ("-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
               "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
               "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON")
FLAVORS = {
    "native": ("-DGGML_NATIVE=ON",),
    "avx2": ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
             "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VBMI=OFF",
             "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
             "-DGGML_AMX_BF16=OFF"),
    "avx512": ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
               "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON",
               "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
               "-DGGML_AMX_BF16=OFF"),
}


def peer_flavor() -> str:
    """The build that is our peer under the ISA cap: avx2 or avx512 where SPECLENS_CPU_ISA caps there, native otherwise."""
    from core.kernels.cpu import isa
    return isa.cap() if isa.cap() in ("avx2", "avx512") else "native"


def not_built(flavor: str | None = None) -> str:
    """What to run when a flavour (by default the cap's peer) is not built."""
    flavor = flavor or peer_flavor()
    if flavor == "native":
        return "llama.cpp is not built: run python -m bench llamacpp build"
    return f"llama.cpp ({flavor} build) is not built: run python -m bench llamacpp build --flavor {flavor}"


def home(version: str = VERSION, flavor: str = "native") -> Path:
    """<cache>/llamacpp/<version> (native) or <version>-<flavor>."""
    if flavor not in FLAVORS:
        raise SpecError(f"unknown llama.cpp flavour {flavor!r} (use one of {', '.join(FLAVORS)})")
    return cache_root() / "llamacpp" / (version if flavor == "native" else f"{version}-{flavor}")


def binary(name: str, version: str = VERSION, flavor: str | None = None) -> Path:
    """The path of a built llama.cpp tool (of the cap's flavour by default), or SpecError saying how to build it."""
    if name not in TOOLS:
        raise SpecError(f"unknown llama.cpp tool {name!r} (built: {', '.join(TOOLS)})")
    flavor = flavor or peer_flavor()
    path = home(version, flavor) / "bin" / name
    if not path.is_file():
        raise SpecError(f"{not_built(flavor)} ({path} missing)")
    return path


def built(version: str = VERSION, flavor: str | None = None) -> bool:
    flavor = flavor or peer_flavor()
    return all((home(version, flavor) / "bin" / t).is_file() for t in TOOLS)


def run_logged(cmd: list, log: Path, cwd: Path | None = None) -> None:
    """Run `cmd` with its output appended to `log`; SpecError naming the log if it fails."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        rc = subprocess.run([str(c) for c in cmd], cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SpecError(f"llama.cpp build step failed ({cmd[0]} exit {rc}); see {log}")


def fetch_sdist(root: Path, log: Path) -> Path:
    """The llama-cpp-python sdist under root/sdist, downloaded by pip (source only, no deps) if absent."""
    found = sorted((root / "sdist").glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    if found:
        return found[0]
    (root / "sdist").mkdir(parents=True, exist_ok=True)
    run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"llama-cpp-python=={VERSION}", "-d", root / "sdist"], log)
    return fetch_sdist(root, log)


def extract_vendor(sdist: Path, root: Path) -> Path:
    """root/src: the sdist's vendor/llama.cpp tree (extracted once; a `.done` marker says it is whole)."""
    src = root / "src"
    if (src / ".done").is_file():
        return src
    shutil.rmtree(src, ignore_errors=True)
    prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.name != prefix]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(src, members=members, filter="data")
    (src / ".done").touch()
    return src


def build(jobs: int = 2, version: str = VERSION, flavor: str = "native") -> Path:
    """Build the tools (if not yet) and return their bin dir; resumable, progress in <home>/build.log.
    Every flavour builds from the native home's sdist and source tree."""
    root = home(version, flavor)
    if built(version, flavor):
        return root / "bin"
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    print(f"building llama.cpp {version} ({flavor}) into {root} (progress: {log})", file=sys.stderr, flush=True)
    base = home(version)
    base.mkdir(parents=True, exist_ok=True)
    src = extract_vendor(fetch_sdist(base, log), base)
    out = root / "build"
    if not (out / "build.ninja").is_file():
        run_logged(["cmake", "-S", src, "-B", out, *CMAKE_FLAGS, *FLAVORS[flavor]], log)
    run_logged(["cmake", "--build", out, "-j", str(jobs), "--target", *TOOLS], log)
    (root / "bin").mkdir(exist_ok=True)
    for t in TOOLS:
        shutil.copy2(out / "bin" / t, root / "bin" / t)
    return root / "bin"
