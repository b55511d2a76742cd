"""Tiny random models and tokenizers: test fixtures and the device check's --tiny run (no download)."""
import torch


def tiny_tokenizer(vocab: int = 512, chat_template: str | None = None):
    """A word-level tokenizer for tiny_model: ids 0-2 = <pad> <s> </s>, then words "w3" ... "w{vocab-1}"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, vocab)}
    core = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   chat_template=chat_template)


def tiny_model(seed: int = 0, vocab: int = 512, layers: int = 2, d: int = 64, attention_bias: bool = False):
    """A tiny random LlamaForCausalLM (fp32, eval mode), deterministic by seed; feed it ids directly."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                         attention_bias=attention_bias)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float().eval()
