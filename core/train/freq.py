"""FR-Spec frequency tables built: tokens counted over a corpus (or the target's own greedy generations) and
saved (python -m core freq). The heads read them with core/decoding/freq.py."""
import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.errors import SpecError
from core.paths import write_atomic

TEXT_FIELDS = ("prompt", "response", "question", "answer", "text", "turns")
SUFFIXES = (".txt", ".jsonl", ".py")


# ---------------------------------------------------------------- corpus

def corpus_files(paths) -> list[Path]:
    """Files to read: each path itself, or a directory's .txt/.jsonl/.py files (sorted)."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file())
        elif p.is_file() and p.suffix in SUFFIXES:
            files.append(p)
        else:
            raise SpecError(f"{p}: not a .txt, .jsonl or .py file or a directory")
    return files


def row_text(row: dict) -> str:
    parts = []
    for field in TEXT_FIELDS:
        value = row.get(field)
        parts += [value] if isinstance(value, str) else [v for v in value or [] if isinstance(v, str)]
    return "\n".join(parts)


def read_texts(path: Path):
    """Yield the texts of one file: a JSONL row's string fields joined, a .py file whole, .txt paragraphs."""
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read as UTF-8 text ({err})") from None
    if path.suffix == ".py":
        yield content
        return
    if path.suffix == ".txt":
        yield from (p for p in content.split("\n\n") if p.strip())
        return
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise SpecError(f"{path}:{n}: not valid JSON") from None
        if isinstance(row, dict):
            yield row_text(row)


# ---------------------------------------------------------------- counting

def count_tokens(tokenizer, texts, batch: int = 256) -> torch.Tensor:
    """LongTensor[V]: how often each token id occurs in `texts` (no special tokens added)."""
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    chunk = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == batch:
            counts += bincount(tokenizer, chunk, len(counts))
            chunk = []
    if chunk:
        counts += bincount(tokenizer, chunk, len(counts))
    return counts


def bincount(tokenizer, texts: list[str], size: int) -> torch.Tensor:
    ids = [i for row in tokenizer(texts, add_special_tokens=False)["input_ids"] for i in row]
    return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=size)[:size]


@torch.no_grad()
def count_generations(model, tokenizer, prompts: list[str], max_new_tokens: int = 128) -> torch.Tensor:
    """LongTensor[V]: tokens the model itself emits greedily after each chat-formatted prompt (VocabTrim)."""
    from core.models import chat_prompt_ids

    device = next(model.parameters()).device
    counts = torch.zeros(len(tokenizer), dtype=torch.long)
    for text in prompts:
        ids = torch.tensor([chat_prompt_ids(tokenizer, text)], device=device)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        counts += torch.bincount(out[0, ids.shape[1]:].cpu(), minlength=len(counts))[:len(counts)]
    return counts


def save_table(path, counts: torch.Tensor, meta: dict) -> None:
    """counts int32 [V] in a safetensors file, `meta` as JSON in its header; written atomically."""
    tensors = {"counts": counts.to(torch.int32).contiguous()}
    write_atomic(path, lambda tmp: save_file(tensors, str(tmp), metadata={"meta": json.dumps(meta)}))


# ---------------------------------------------------------------- CLI: python -m core freq

def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m core freq",
                                description="Build an FR-Spec token frequency table.")
    p.add_argument("--corpus", nargs="+", default=[], metavar="FILE",
                   help=".txt / .jsonl / .py files or directories to count")
    p.add_argument("--out", required=True, metavar="PATH", help="output .safetensors table")
    p.add_argument("--model", default=None, metavar="ID", help="model whose tokenizer counts (default: SmolLM2)")
    p.add_argument("--calibrate", nargs="+", default=[], metavar="PROMPTS",
                   help="prompt files: also count the model's own greedy generations")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    p.add_argument("--limit", type=int, default=None, help="at most this many calibration prompts")
    return p.parse_args(argv)


def build(args) -> tuple[torch.Tensor, dict]:
    from core.models import DEFAULT_MODEL, load_model, load_tokenizer

    model_id = args.model or DEFAULT_MODEL
    if not args.corpus and not args.calibrate:
        raise SpecError("give --corpus FILES and/or --calibrate PROMPTS")
    files = corpus_files(args.corpus)
    tokenizer = load_tokenizer(model_id)
    counts = count_tokens(tokenizer, (t for f in files for t in read_texts(f)))
    meta = {"model": model_id, "vocab_size": len(tokenizer), "corpus": [f.name for f in files],
            "corpus_tokens": int(counts.sum())}
    if args.calibrate:
        from core.prompts import load_prompts

        model, tokenizer = load_model(model_id)
        prompts = [p.text for p in load_prompts(args.calibrate, limit=args.limit)]
        generated = count_generations(model, tokenizer, prompts, args.max_new_tokens)
        counts += generated
        meta |= {"calibrate": [Path(c).name for c in args.calibrate], "calibrate_prompts": len(prompts),
                 "max_new_tokens": args.max_new_tokens, "generated_tokens": int(generated.sum())}
    return counts, meta


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        counts, meta = build(args)
        save_table(args.out, counts, meta)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}: {meta['vocab_size']} ids, {int((counts > 0).sum())} seen, {int(counts.sum())} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
