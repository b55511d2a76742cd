"""device-check --tiny: a tiny random causal LM with a byte-level tokenizer, saved as a checkpoint dir, so that
every step (Pipeline, trainers, paper grid, the weights chunk path) runs on it exactly as on the default model."""
import shutil
from pathlib import Path

import torch

VOCAB = 320            # 3 specials + 256 bytes, rounded up (ids 259.. are never produced by the tokenizer)
CHAT = ("{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<s>{% endif %}")


def byte_tokenizer():
    """Byte-level BPE with no merges: any text encodes (one id per UTF-8 byte); <pad> <s> </s> = 0 1 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2} | {c: i + 3 for i, c in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   chat_template=CHAT)


def save_tiny(out: Path, seed: int = 0, scale: float = 8.0) -> Path:
    """A peaked tiny random llama (lm_head x scale: random init is near-uniform, every greedy step a near-tie)
    and its tokenizer, saved at `out` (a checkpoint dir core.models.load_model reads)."""
    from tools.tiny import tiny_model
    out = Path(out)
    if (out / "config.json").is_file():
        return out
    model = tiny_model(seed=seed, vocab=VOCAB)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    byte_tokenizer().save_pretrained(tmp)
    tmp.rename(out)
    return out


def chunk_round_trip(model_dir: Path, work: Path, part_bytes: int = 64 << 10) -> dict:
    """The weights path of a real run on `model_dir`: split into parts, receive them one call at a time
    (each call's src holds the manifest and one part), install under work/cache, reload and compare."""
    from tools import chunks
    from core.models import load_model
    files = [(f, f"models/tiny/{f.name}") for f in sorted(Path(model_dir).iterdir()) if f.is_file()]
    manifest = chunks.split(files, work / "parts", part_bytes)
    calls = []
    for part in manifest["parts"]:
        call = work / f"call-{len(calls)}"
        call.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "parts" / "manifest.json", call)
        shutil.copy(work / "parts" / part["name"], call)
        calls.append(chunks.receive(call, work / "store", cache=work / "cache"))
    back, _ = load_model(str(work / "cache" / "models" / "tiny"), device="cpu", dtype=torch.float32)
    orig, _ = load_model(str(model_dir), device="cpu", dtype=torch.float32)
    same = all(torch.equal(a, b) for a, b in zip(orig.state_dict().values(), back.state_dict().values()))
    return {"files": len(files), "bytes": sum(f["size"] for f in manifest["files"]),
            "compressed": sum(p["size"] for p in manifest["parts"]), "parts": len(manifest["parts"]),
            "installed_after_call": next(i + 1 for i, c in enumerate(calls) if c["installed"]),
            "sha256_checked": len(manifest["parts"]) + len(files), "weights_equal": same, "codec": manifest["codec"]}
