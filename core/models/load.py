"""A model id (an offline alias, a local checkpoint dir or a Hugging Face Hub id) loaded as a transformers model and
tokenizer, with one-line errors where the Hub is out of reach; chat prompts and the draft/target tokenizer check."""
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from core.errors import SpecError
from core.models.aliases import ALIASES, DEFAULT_MODEL, model_alias
from core.models.fetch import cached_checkpoint, source_gguf
from core.models.resources import check_memory


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


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
    if torch.device(device).type == "cpu":
        check_memory(model_alias(model_id) or "", dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs)
    except (OSError, ValueError) as err:
        raise hub_error(model_id, err) from None
    model.speclens_gguf = source_gguf(model_id)
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
