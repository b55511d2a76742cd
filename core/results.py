"""What was measured where: results/results.jsonl, one row per measurement (date, commit, CPU model, features and
class, threads, model, command, figures), appended by the benchmarks (`--record`, bench/results.py; the README's
results table is rendered from it). The product reads it: `like_this_cpu()` returns the rows measured on CPUs of
this one's class, for "measured on CPUs like yours"."""
import json
from pathlib import Path

from core.paths import ROOT

RESULTS = ROOT / "results" / "results.jsonl"
CLASSES = ("amx", "avx512", "avx2", "other")  # best first: what the CPU kernels dispatch on (core/kernels/cpu/isa.py)
CLASS_LABELS = {"amx": "AMX", "avx512": "AVX-512, no AMX", "avx2": "AVX2 only", "other": "without AVX2"}


def cpu_class(features, cap: str = "") -> str:
    """The class of a CPU with these /proc/cpuinfo features under an ISA cap (SPECLENS_CPU_ISA: avx512, avx2, none;
    "" or amx: no cap): the best the kernels run there."""
    f = set(features)
    have = "amx" if "amx_tile" in f else "avx512" if "avx512f" in f else "avx2" if "avx2" in f else "other"
    capped = {"avx512": "avx512", "avx2": "avx2", "none": "other"}.get(cap, "amx")
    return max(have, capped, key=CLASSES.index)


def read_rows(path: Path = RESULTS) -> list:
    """Every row of the results file, in file order ([] without one)."""
    if not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def this_cpu() -> dict:
    """This machine's CPU model, features, cap and class, as a results row names them."""
    from core.kernels.cpu import doctor, isa
    features, cap = doctor.cpu_features(), isa.cap()
    cap = "" if cap == "amx" else cap
    return {"cpu_model": cpu_model(doctor.cpuinfo("model name"), doctor.cpuinfo("cpu family"), features),
            "cpu_features": features, "isa_cap": cap, "cpu_class": cpu_class(features, cap)}


def cpu_model(name: str, family: str, features: list) -> str:
    """The model name, with AMD's core generation where a VM shows only "AMD EPYC": family 25 (0x19) is Zen 3, or Zen 4
    with AVX-512; family 26 (0x1A) is Zen 5."""
    if name.strip() != "AMD EPYC" or family not in ("25", "26"):
        return name
    return name + (" Zen 5" if family == "26" else " Zen 4" if "avx512f" in features else " Zen 3")


def like_this_cpu(path: Path = RESULTS) -> list:
    """The rows measured on CPUs of this one's class (the newest last)."""
    cls = this_cpu()["cpu_class"]
    return [r for r in read_rows(path) if r.get("cpu_class") == cls]
