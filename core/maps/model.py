"""What the doctor checks a map against: the model's vocabulary size, tokenizer and the tokens every map needs.

Needs only the tokenizer and config.json (no weights): `check` runs in seconds for any model SpecLens loads.
"""
from dataclasses import dataclass, field

import torch


# vocabulary sizes (config.json vocab_size; the tokenizer's length where it differs) of tokenizers whose maps
# circulate: a t2d or an LM head of one of these sizes on another model names the tokenizer it was built for
KNOWN_VOCABS = {32000: "Llama-2 / Mistral-7B v0.1", 32064: "Phi-3", 32768: "Mistral v0.3", 49152: "SmolLM2",
                50257: "GPT-2", 100352: "Phi-4", 128256: "Llama-3", 129280: "DeepSeek-V3",
                151646: "the Qwen2 tokenizer", 151665: "the Qwen2.5 tokenizer", 151936: "Qwen2 / Qwen2.5",
                152064: "Qwen2.5-7B+", 256000: "Gemma / Gemma-2", 262144: "Gemma-3"}


@dataclass
class ModelFacts:
    name: str
    vocab_size: int                  # V: rows of the target's embedding / LM head (config.json)
    tokenizer_size: int              # len(tokenizer): ids >= this are padding rows no text produces
    eos_ids: list                    # the tokenizer's and generation config's end-of-sequence ids
    chat_ids: list                   # added tokens the chat template writes (<|im_start|>, <|im_end|>, ...)
    special_ids: list                # every special token (core.decoding.freq.special_ids: what exported maps keep)
    tokens: dict = field(default_factory=dict)  # id -> token string, for the ids above
    ranks: torch.Tensor | None = None            # FR-Spec corpus rank per id (0 = most frequent), if shipped
    tokenizer: object = None

    def label(self, i: int) -> str:
        return f"{i} {self.tokens.get(i, '?')!r}" if i in self.tokens else str(i)


def chat_template_ids(tokenizer) -> list:
    """Added tokens a two-turn chat formatted by the tokenizer's template contains."""
    if not getattr(tokenizer, "chat_template", None):
        return []
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    added = set(tokenizer.added_tokens_decoder)
    return sorted({i for i in tokenizer(text, add_special_tokens=False)["input_ids"] if i in added})


def eos_ids_of(tokenizer, source: str, kwargs: dict) -> list:
    ids = {tokenizer.eos_token_id}
    try:
        from transformers import GenerationConfig
        gen = GenerationConfig.from_pretrained(source, **kwargs).eos_token_id
        ids.update(gen if isinstance(gen, (list, tuple)) else [gen])
    except (OSError, ValueError):  # no generation_config.json: the tokenizer's eos alone
        pass
    return sorted(i for i in ids if i is not None)


def config_vocab_size(source: str, kwargs: dict, tokenizer) -> int:
    from transformers import AutoConfig
    try:
        cfg = AutoConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError):
        return len(tokenizer)
    cfg = getattr(cfg, "text_config", None) or cfg
    return int(getattr(cfg, "vocab_size", None) or len(tokenizer))


def load_facts(model_id: str) -> ModelFacts:
    """The facts of a model SpecLens loads (offline alias or Hub id), from its tokenizer and config.json."""
    from core.decoding.freq import special_ids
    from core.models import load_tokenizer, resolve_source
    from core.pipeline import load_fr_ranks
    tokenizer = load_tokenizer(model_id)
    source, kwargs = resolve_source(model_id)
    V = config_vocab_size(source, kwargs, tokenizer)
    eos, chat, special = eos_ids_of(tokenizer, source, kwargs), chat_template_ids(tokenizer), special_ids(tokenizer)
    named = set(eos) | set(chat) | set(special)
    tokens = {i: tokenizer.convert_ids_to_tokens(i) for i in named}
    return ModelFacts(model_id, V, len(tokenizer), eos, chat, special, tokens, load_fr_ranks(model_id, V), tokenizer)


def ranked_map(ranks: torch.Tensor, k: int, always) -> torch.Tensor:
    """Sorted int64 [k]: the `always` ids plus the best-ranked others (FR-Spec's map at exactly k ids)."""
    always = torch.unique(torch.as_tensor(sorted(always), dtype=torch.long))
    order = torch.argsort(ranks)
    rest = order[~torch.isin(order, always)][: max(k - len(always), 0)]
    return torch.sort(torch.cat([always, rest])).values
