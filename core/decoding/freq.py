"""FR-Spec frequency tables as the draft heads read them: a table's counts, the ranks they give, and the FR-Spec
vocabulary (the top-k ids plus the ids a draft must keep). Counting a corpus: core/train/freq.py."""
import json

import torch
from safetensors import safe_open

from core.errors import SpecError

# ---------------------------------------------------------------- storage

def load_table(path) -> tuple[torch.Tensor, dict]:
    """(counts LongTensor[V], meta dict) of a saved table."""
    try:
        with safe_open(str(path), framework="pt") as f:
            counts, header = f.get_tensor("counts").long(), f.metadata() or {}
    except Exception as err:  # safetensors raises its own error types for bad files
        raise SpecError(f"{path}: not a frequency table ({err})") from None
    return counts, json.loads(header.get("meta", "{}"))


# ---------------------------------------------------------------- ranks + FR-Spec vocabulary

def ranks_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """rank[id]: 0 = most frequent; ties broken by lower id; unseen tokens (count 0) after every seen one."""
    order = torch.sort(-counts, stable=True).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(len(order))
    return ranks


def fit_counts(counts: torch.Tensor, vocab_size: int, path) -> torch.Tensor:
    """Pad with unseen tokens, or drop a never-seen tail, to match the model's vocabulary size."""
    if len(counts) > vocab_size and counts[vocab_size:].any():
        raise SpecError(f"{path}: frequency table has {len(counts)} tokens, the model only {vocab_size}")
    fitted = torch.zeros(vocab_size, dtype=torch.long)
    n = min(len(counts), vocab_size)
    fitted[:n] = counts[:n]
    return fitted


def load_ranks(path, vocab_size: int) -> torch.Tensor:
    """LongTensor[vocab_size] of frequency ranks from a table file (core.models.freq_table finds a model's)."""
    return ranks_from_counts(fit_counts(load_table(path)[0], vocab_size, path))


def special_ids(tokenizer) -> list[int]:
    """Ids a draft vocabulary must always keep: EOS, the special tokens, and the chat template's added tokens."""
    ids = set(tokenizer.all_special_ids)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if getattr(tokenizer, "chat_template", None):
        chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        added = set(tokenizer.added_tokens_decoder)
        ids |= {i for i in tokenizer(text, add_special_tokens=False)["input_ids"] if i in added}
    return sorted(ids)


def frspec_ids(ranks: torch.Tensor, k: int, always=()) -> torch.Tensor:
    """Sorted LongTensor of the k most frequent ids plus `always` (so |result| >= min(k, V))."""
    if k < 1:
        raise SpecError(f"FR-Spec vocabulary size must be >= 1, got {k}")
    always = torch.as_tensor(list(always), dtype=torch.long)
    if len(always) and (always.min() < 0 or always.max() >= len(ranks)):
        raise SpecError(f"always-included token ids must be in [0, {len(ranks)})")
    return torch.unique(torch.cat([(ranks < k).nonzero().flatten(), always]))
