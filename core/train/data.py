"""EAGLE training data: the target and its prompt/response pairs, their chat ids, and the feature cache (target
features by teacher forcing on the pairs, or on the target's own greedy generations with --self-distill N), kept on
disk as fp16 shards in DIR/cache, resumable.
"""
import glob
import json
import math
import os
import random
import time

import torch

from core.paths import write_atomic
from core.train.loop import logger


def load_target(target_id, device="cpu"):
    from core.models import load_model
    return load_model(target_id, device=device, dtype=torch.float32)


def read_pairs(files):
    """[(prompt, response)] from JSONL files with prompt/response (or gsm8k question/answer)."""
    pairs = []
    for f in files:
        with open(f) as fh:
            for line in fh:
                r = json.loads(line)
                p, a = r.get("prompt", r.get("question")), r.get("response", r.get("answer"))
                if p:
                    pairs.append((p, a or ""))
    return pairs


def read_globs(spec: str):
    """read_pairs over the files matching comma-separated globs, in sorted file order."""
    return read_pairs(sorted(sum([glob.glob(p) for p in spec.split(",")], [])))


def split_pairs(tcfg):
    pairs = read_globs(tcfg.data)
    random.Random(tcfg.seed).shuffle(pairs)
    return pairs[:tcfg.n_eval], pairs[tcfg.n_eval:]


def chat_ids(tok, prompt, response=None):
    """The prompt as one user turn (chat template + generation prompt), then the response's ids if given."""
    from core.models import chat_prompt_ids
    ids = chat_prompt_ids(tok, prompt)
    if response is not None:
        ids += tok(response, add_special_tokens=False)["input_ids"]
    return ids


def response_marker(tok):
    """The generation-prompt ids the chat template appends before the assistant's response."""
    msgs = [{"role": "user", "content": "x"}]
    a, b = (tok.apply_chat_template(msgs, add_generation_prompt=g, tokenize=True) for g in (True, False))
    a, b = (list(x["input_ids"] if hasattr(x, "keys") else x) for x in (a, b))
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[n:]


def response_start(x, marker):
    """Index of the first response token of x (after the last `marker`); 0 if there is none."""
    x, m = x.tolist(), len(marker)
    for i in range(len(x) - m, -1, -1):
        if x[i:i + m] == marker:
            return i + m
    return 0


class FeatureHook:
    """Grabs the input of the target's final norm = last decoder layer output before the norm."""

    def __init__(self, model):
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.chunks = []
        self.h = base.norm.register_forward_pre_hook(lambda m, a: self.chunks.append(a[0].detach()))

    def take(self):
        out, self.chunks = self.chunks, []
        return out


@torch.no_grad()
def generate_batch(model, tok, prompts, tcfg, hook, max_time=None):
    """Greedy batched generation (left padding, KV cache). Returns [(ids int32 [L], feats fp16 [L, d])].
    max_time: seconds, after which the generations end where they are (transformers' max_time)."""
    seqs = [chat_ids(tok, p)[-tcfg.max_prompt:] for p in prompts]
    P = max(len(s) for s in seqs)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (P - len(s)) + s for s in seqs]).to(model.device)
    att = torch.tensor([[0] * (P - len(s)) + [1] * len(s) for s in seqs]).to(model.device)
    hook.take()
    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=tcfg.max_new, do_sample=False,
                         pad_token_id=pad, eos_token_id=tok.eos_token_id, max_time=max_time)
    feats = torch.cat(hook.take(), 1)  # [B, P + G - 1, d]
    res = []
    for b, s in enumerate(seqs):
        gen = out[b, P:].tolist()
        g = len(gen)
        if tok.eos_token_id in gen:
            g = gen.index(tok.eos_token_id) + 1
        L = min(len(s) + g, feats.shape[1] - (P - len(s)))
        full = (s + gen[:g])[:L]
        res.append((torch.tensor(full, dtype=torch.int32), feats[b, P - len(s):P - len(s) + L].to(torch.float16).cpu()))
    return res


@torch.no_grad()
def teacher_force_batch(model, tok, pairs, tcfg, hook):
    seqs = [chat_ids(tok, p, a)[:tcfg.max_prompt + tcfg.max_new] for p, a in pairs]
    T = max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (T - len(s)) for s in seqs]).to(model.device)
    att = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs]).to(model.device)
    hook.take()
    model.model(input_ids=ids, attention_mask=att)
    feats = hook.take()[0]
    return [(torch.tensor(s, dtype=torch.int32), feats[b, :len(s)].to(torch.float16).cpu()) for b, s in enumerate(seqs)]


def build_cache(model, tok, tcfg, pairs):
    """Fill DIR/cache/shard_*.pt (resumable: existing shards are kept)."""
    cdir = os.path.join(tcfg.out, "cache")
    os.makedirs(cdir, exist_ok=True)
    n = tcfg.self_distill if tcfg.self_distill else len(pairs)
    pairs = pairs[:n]
    hook = FeatureHook(model)
    n_shards = math.ceil(len(pairs) / tcfg.shard_size)
    have = cached_tokens(tcfg.out)
    t0, made = time.time(), 0
    for i in range(n_shards):
        path = os.path.join(cdir, f"shard_{i:05d}.pt")
        if os.path.exists(path):
            continue
        if tcfg.max_tokens and have >= tcfg.max_tokens or tcfg.gen_minutes and time.time() - t0 > tcfg.gen_minutes * 60:
            break
        chunk = pairs[i * tcfg.shard_size:(i + 1) * tcfg.shard_size]
        chunk = sorted(chunk, key=lambda pa: len(pa[0]))  # similar lengths share a batch: less padding
        rows = []
        for j in range(0, len(chunk), tcfg.gen_batch):
            part = chunk[j:j + tcfg.gen_batch]
            if tcfg.self_distill:
                left = tcfg.gen_minutes * 60 - (time.time() - t0) if tcfg.gen_minutes else None
                rows += generate_batch(model, tok, [p for p, _ in part], tcfg, hook, max(left, 1.0) if left else None)
            else:
                rows += teacher_force_batch(model, tok, part, tcfg, hook)
        save_rows(path, rows)
        ntok = sum(len(r[0]) for r in rows)
        have += ntok
        made += ntok
        logger(tcfg)(f"cache shard {i + 1}/{n_shards}: {ntok} tok, total {have}, {made / (time.time() - t0):.0f} tok/s")
    hook.h.remove()


def save_rows(path, rows) -> None:
    """A cache shard or the held-out set, written atomically: {"ids": [...], "feats": [...]}."""
    write_atomic(path, lambda tmp: torch.save({"ids": [r[0] for r in rows], "feats": [r[1] for r in rows]}, tmp))


def build_heldout(model, tok, tcfg, pairs):
    """DIR/heldout.pt: the target's greedy generations of tcfg.holdout eval-split prompts (never trained on)."""
    path = os.path.join(tcfg.out, "heldout.pt")
    if not tcfg.holdout or os.path.exists(path):
        return
    hook = FeatureHook(model)
    rows = []
    for j in range(0, tcfg.holdout, tcfg.gen_batch):
        rows += generate_batch(model, tok, [p for p, _ in pairs[j:min(j + tcfg.gen_batch, tcfg.holdout)]], tcfg, hook)
    hook.h.remove()
    save_rows(path, rows)
    logger(tcfg)(f"held-out: {len(rows)} generations, {sum(len(r[0]) for r in rows)} tok")


def cached_tokens(out):
    n = 0
    for p in glob.glob(os.path.join(out, "cache", "shard_*.pt")):
        n += sum(len(x) for x in torch.load(p)["ids"])
    return n


def cache_dirs(tcfg) -> list:
    """The dirs whose cache/ shards train-eagle trains on: --out and --extra-cache's."""
    return [tcfg.out] + [d for d in tcfg.extra_cache.split(",") if d]


def load_cache(out, skip=(), mmap=False):
    """(ids, feats, shard paths) of DIR/cache's shards (DIR: one or a list), less the paths in `skip` (those already
    loaded); mmap: the shards mapped, not read (feats read only where used)."""
    ids, feats, paths = [], [], []
    dirs = [out] if isinstance(out, str) else out
    shards = [p for d in dirs for p in sorted(glob.glob(os.path.join(d, "cache", "shard_*.pt")))]
    for p in shards:
        if p in skip:
            continue
        s = torch.load(p, mmap=mmap)
        ids += s["ids"]
        feats += s["feats"]
        paths.append(p)
    return ids, feats, paths


def load_heldout(tcfg, marker):
    """(ids, feats, response starts) of DIR/heldout.pt, or None."""
    path = os.path.join(tcfg.out, "heldout.pt")
    if not os.path.exists(path):
        return None
    h = torch.load(path)
    return h["ids"], h["feats"], [response_start(x, marker) for x in h["ids"]]
