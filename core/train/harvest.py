"""python -m core.train.harvest --model M --out DIR: the target's own greedy answers to corpus prompts, with the features
the engine drafts from, many sequences per pass, as train-eagle's cache shards.

--source magpie asks the target for the questions too (Magpie, Xu et al. 2024): after its chat template's user header
it samples a user turn (temperature 1) from its own instruction-tuning distribution, then answers it greedily. Shard i's
questions come from seed (--seed, i), so a resumed harvest writes the same shards.

The fast runtime decodes a wave of --batch prompts at once: every sequence's entries sit in one cache, all pending, and
each row sees its own sequence's entries alone (a block-diagonal mask over the cache). Rows are stable (a row's result
does not depend on the rows beside it, and attention sums over the visible keys only, in order), so every feature and
token equals a one-sequence run's bit for bit: the answers are the target's greedy decoding and the features those the
engine's verify passes give the head. Each row attends over the whole packed cache, so waves pay only up to ~8
sequences (SmolLM2 on 2 cores: 1.09x single stream at 8, 0.82x at 16; docs/log/2026-12-07-eagle-harvest-rate.md).

    DIR/cache/shard_NNNNN.pt   {"ids": [int32 [L]], "feats": [fp16 [L, d]]}: --shard prompts each (train-eagle's format)
    DIR/harvest.json           progress: shards, tokens, tokens/s, ETA, the settings
Rerunning the same command resumes at the first missing shard; --minutes stops it after the shard in flight.
"""
import json
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from core.paths import write_atomic

DATA = "../shared/data/instructions_*.jsonl,../shared/data/gsm8k_train.jsonl"


@dataclass
class HarvestConfig:
    model: str = "smollm2-135m-instruct"
    out: str = ""
    data: str = DATA
    batch: int = 8           # sequences per wave (more: each row attends over the whole packed cache, slower)
    shard: int = 64          # prompts per shard
    max_new: int = 256
    max_prompt: int = 384
    skip: int = 32           # the first prompts of the shuffled list: train-eagle's held-out split (n_eval)
    seed: int = 0
    minutes: float = 0.0     # stop after the shard in flight once this much time has passed (0: no limit)
    threads: int = 2
    source: str = "corpus"   # corpus | magpie (questions sampled from the target itself)
    shards: int = 400        # --source magpie: shards to write
    max_question: int = 128  # --source magpie: longest question sampled (one that runs longer is dropped)


class Packed:
    """Many sequences in one runner's cache, every entry pending; a row sees its own sequence's entries alone."""

    def __init__(self, runner):
        self.runner = runner
        runner.reset()
        self.owner = torch.zeros(0, dtype=torch.long)  # the sequence of each cache entry

    def forward(self, seqs: list, ids: list, pos: list):
        """One row per (sequence, token id, position), in the order given (a sequence's rows in position order).
        Returns (hidden after the final norm [n, d], features before it [n, d])."""
        new = torch.tensor(seqs)
        owner = torch.cat([self.owner, new])
        mask = owner[None, :] == new[:, None]  # [n, P + n]: the same sequence
        P = self.owner.numel()
        mask[:, P:] &= torch.ones(len(seqs), len(seqs), dtype=torch.bool).tril()  # causal among the new rows
        self.owner = owner
        return self.runner.forward(torch.tensor(ids), torch.tensor(pos), mask)


def greedy(logits) -> list:
    return logits.argmax(-1).tolist()


def sampler(gen: torch.Generator, temperature: float = 1.0):
    """pick(logits [n, V]) -> n ids drawn from softmax(logits / temperature) with `gen`."""
    return lambda logits: torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1, generator=gen).view(-1).tolist()


@torch.no_grad()
def decode_wave(runner, prompts: list, max_new: int, eos: set, pick=greedy) -> list:
    """[(ids int32 [L], feats fp16 [L, d])] of answers to `prompts` (token id lists) picked by `pick` (greedy: the
    target's own decoding), decoded together. As in train-eagle's generations, the last token (whose feature no pass
    computes) is left out."""
    packed = Packed(runner)
    seqs = [list(p) for p in prompts]
    rows = [(b, t, i) for b, p in enumerate(prompts) for i, t in enumerate(p)]
    hid, feats = packed.forward(*map(list, zip(*rows)))
    ends = torch.tensor([len(p) for p in prompts]).cumsum(0) - 1
    out_feats = [[feats[e - len(p) + 1:e + 1]] for p, e in zip(prompts, ends.tolist())]
    nxt = pick(runner.logits(hid[ends]))
    live = list(range(len(prompts)))
    for step in range(max_new):
        for b, t in zip(live, nxt):
            seqs[b].append(t)
        live = [b for b, t in zip(live, nxt) if t not in eos and step + 1 < max_new]
        if not live:
            break
        hid, feats = packed.forward(live, [seqs[b][-1] for b in live], [len(seqs[b]) - 1 for b in live])
        for i, b in enumerate(live):
            out_feats[b].append(feats[i:i + 1])
        nxt = pick(runner.logits(hid))
    runner.reset()
    return [(torch.tensor(s[:-1], dtype=torch.int32), torch.cat(f).to(torch.float16)) for s, f in zip(seqs, out_feats)]


def user_header(tok) -> list:
    """The chat template's ids up to where a user's turn begins."""
    text = tok.apply_chat_template([{"role": "user", "content": "\x00"}], tokenize=False)
    return tok(text[:text.index("\x00")], add_special_tokens=False)["input_ids"]


def magpie_questions(runner, tok, n: int, hc: HarvestConfig, eos: set, seed: int) -> list:
    """Up to n distinct user questions sampled from the target after its user header; a question that does not end
    within hc.max_question tokens is dropped."""
    head, gen = user_header(tok), torch.Generator().manual_seed(seed)
    out = []
    for j in range(0, n, hc.batch):
        for ids, _ in decode_wave(runner, [head] * min(hc.batch, n - j), hc.max_question, eos, sampler(gen)):
            q = ids[len(head):].tolist()
            if len(q) < hc.max_question - 1:  # ended on its own (the end token is not in ids)
                out.append(tok.decode(q).strip())
    return list(dict.fromkeys(x for x in out if x))


def corpus_prompts(hc: HarvestConfig) -> list:
    """The corpus prompts in train-eagle's shuffled order, less its held-out split."""
    from core.train.data import read_globs
    pairs = read_globs(hc.data)
    random.Random(hc.seed).shuffle(pairs)
    return [p for p, _ in pairs[hc.skip:]]


def shard_rows(runner, tok, prompts: list, hc: HarvestConfig, eos: set) -> list:
    """One shard: its prompts in waves of similar lengths (less padding of work)."""
    from core.train.data import chat_ids
    ids = sorted((chat_ids(tok, p)[-hc.max_prompt:] for p in prompts), key=len)
    rows = []
    for j in range(0, len(ids), hc.batch):
        rows += decode_wave(runner, ids[j:j + hc.batch], hc.max_new, eos)
    return rows


def progress(hc: HarvestConfig, done: int, total: int, tokens: int, made: int, seconds: float) -> dict:
    rate = made / seconds if seconds else 0.0
    left = (total - done) * (tokens / max(done, 1)) / rate if rate else None
    return {"shards_done": done, "shards": total, "tokens": tokens, "tok_per_s": round(rate, 1),
            "eta_h": None if left is None else round(left / 3600, 2), "settings": asdict(hc)}


def harvest(pipe, hc: HarvestConfig, log=print) -> dict:
    from core.train.data import save_rows
    cache = Path(hc.out) / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    prompts = corpus_prompts(hc) if hc.source == "corpus" else None
    total = (len(prompts) + hc.shard - 1) // hc.shard if prompts is not None else hc.shards
    done = sorted(cache.glob("shard_*.pt"))
    tokens = sum(sum(len(x) for x in torch.load(p)["ids"]) for p in done)
    t0, made, state = time.monotonic(), 0, {}
    for i in range(total):
        path = cache / f"shard_{i:05d}.pt"
        if path.exists():
            continue
        if hc.minutes and time.monotonic() - t0 > hc.minutes * 60:
            break
        part = prompts[i * hc.shard:(i + 1) * hc.shard] if prompts is not None else \
            magpie_questions(pipe.target, pipe.tokenizer, hc.shard, hc, pipe.eos_ids(), hc.seed * 100003 + i)
        rows = shard_rows(pipe.target, pipe.tokenizer, part, hc, pipe.eos_ids())
        save_rows(path, rows)
        n = sum(len(r[0]) for r in rows)
        tokens, made = tokens + n, made + n
        state = progress(hc, len(list(cache.glob("shard_*.pt"))), total, tokens, made, time.monotonic() - t0)
        write_atomic(Path(hc.out) / "harvest.json", json.dumps(state, indent=1))
        log(f"shard {i + 1}/{total}: {n} tok, {tokens} in all, {state['tok_per_s']} tok/s, ETA {state['eta_h']} h")
    return state


def main(argv=None) -> int:
    from core.train.loop import parse_config
    hc = parse_config(HarvestConfig, argv, "python -m core.train.harvest")
    if not hc.out:
        raise SystemExit("--out DIR is required")
    if hc.source not in ("corpus", "magpie"):
        raise SystemExit(f"--source must be corpus or magpie, got {hc.source!r}")
    torch.set_num_threads(hc.threads)
    from core.pipeline import Pipeline
    pipe = Pipeline.load(hc.model, draft="context")
    log_path = Path(hc.out) / "harvest.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def log(msg):
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}"
        print(line, flush=True)
        with open(log_path, "a") as fh:
            fh.write(line + "\n")

    log(f"harvest {hc.model} ({pipe.runtime_note}) -> {hc.out}, batch {hc.batch}, pid {os.getpid()}")
    harvest(pipe, hc, log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
