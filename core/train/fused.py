"""python -m core.train.fused: does an EAGLE head draft better when a low and a middle layer of the target are fused
into its input (EAGLE-3), or with a second decoder layer, than as it is? Measured, not assumed.

The arms continue the same head (--init, a train-eagle ckpt.pt) on the same batches for the same steps:
  last:  the first draft step reads f_t, the last layer's feature (as the engine drafts today);
  fused: it reads f_t + W_fuse [rms(l_t); rms(m_t)], l/m the outputs of --layers (W_fuse [2d -> d], zero at the
         start, so the arms begin as the same head). Deeper steps feed the head its own output in every arm;
  deep:  a second decoder layer after the head's own (its writes to the residual start at zero).
All features come from transformers' target (bf16 by default), teacher-forced, so the arms differ only in the fusion.

  python -m core.train.fused features --out DIR --cache H1,H2 --seqs 4000     # DIR/feats.pt (+ the held-out sets)
  python -m core.train.fused train --out DIR --arm fused --init CKPT --steps 600  # DIR/<arm>.log, agreement curves

Agreement = top-1 over the full vocabulary at answer positions, per draft depth (teacher-forced, as train-eagle's
held-out check): on the held-out corpus answers of --heldout and on the target's greedy answers to
assets/prompts/heldout.jsonl (never trained on).
"""
import argparse
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

from core.train.data import FeatureHook, chat_ids, load_cache, load_target, response_marker, response_start
from core.train.eagle import (
    TrainConfig, cached_answers, draft_losses, feature_scale, heldout_agreement, new_head, sample_batch, token_subset,
    with_batch_ids, with_negatives,
)
from core.train.loop import lr_at, progress_log, set_lr


@torch.no_grad()
def layer_features(model, seq, layers) -> torch.Tensor:
    """[len(seq), (1 + len(layers)) d] fp16: the last layer's output before the final norm (the feature the head
    regresses), then each of `layers`' outputs (0-based layer index)."""
    hook = FeatureHook(model)
    out = model.model(input_ids=torch.tensor([seq]), output_hidden_states=True)
    hook.h.remove()
    hs = out.hidden_states  # (embeddings, layer 0 out, ..., norm(last out))
    return torch.cat([hook.take()[0][0]] + [hs[i + 1][0] for i in layers], -1).half()


@torch.no_grad()
def greedy_answer(model, tok, prompt, n) -> list:
    ids = chat_ids(tok, prompt)
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id)
    return out[0].tolist()


def features(args) -> int:
    """DIR/feats.pt: {layers, train: [(ids, feats)], heldout: {name: [(ids, feats, start)]}}."""
    torch.set_num_threads(args.threads)
    model, tok = load_target(args.target)
    model = model.to(getattr(torch, args.dtype))
    layers = [int(x) for x in args.layers.split(",")]
    ids, _, _ = load_cache(args.cache.split(","), mmap=True)  # the ids only: the cached features stay on disk
    rng = random.Random(args.seed)
    pick = rng.sample(range(len(ids)), min(args.seqs, len(ids)))
    marker = response_marker(tok)
    log = progress_log(os.path.join(args.out, "features.log"))
    train, t0, n = [], time.time(), 0
    for k, i in enumerate(pick):
        x = ids[i].long().tolist()[:args.max_len]
        train.append((torch.tensor(x, dtype=torch.int32), layer_features(model, x, layers)))
        n += len(x)
        if k % 200 == 0:
            log(f"{k}/{len(pick)} seqs, {n} tokens, {n / (time.time() - t0):.0f} tok/s")
    held = {}
    if args.heldout:
        h = torch.load(args.heldout)
        held["corpus"] = [(x, layer_features(model, x.long().tolist(), layers), response_start(x, marker))
                          for x in h["ids"]]
    from core.prompts import load_prompts
    qs = [q.text for q in load_prompts(args.prompts)]
    held["prompts"] = []
    for q in qs:
        seq = greedy_answer(model, tok, q, args.max_new)
        held["prompts"].append((torch.tensor(seq, dtype=torch.int32), layer_features(model, seq, layers),
                                len(chat_ids(tok, q))))
    torch.save({"layers": layers, "train": train, "heldout": held}, os.path.join(args.out, "feats.pt"))
    log(f"done: {len(train)} seqs, {n} tokens; held-out {', '.join(f'{k} {len(v)}' for k, v in held.items())}")
    return 0


class Fusion(torch.nn.Module):
    """f_t + W_fuse [rms(l_t); rms(m_t); ...]: W_fuse [k d -> d], zero at the start."""

    def __init__(self, d, k):
        super().__init__()
        self.d = d
        self.proj = torch.nn.Linear(k * d, d, bias=False)
        torch.nn.init.zeros_(self.proj.weight)

    def forward(self, fe):
        f, aux = fe[..., :self.d], fe[..., self.d:]
        aux = torch.cat([F.rms_norm(a, (self.d,)) for a in aux.split(self.d, -1)], -1)
        return f + self.proj(aux.to(self.proj.weight.dtype))


class Deeper(torch.nn.Module):
    """The head with a second decoder layer after its own: a copy of it whose o_proj and down_proj start at zero, so
    the deeper head starts as the head. (k, v) of both layers travel stacked on the batch axis [2B, ...]."""

    def __init__(self, head):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer
        self.head, self.d = head, head.d
        self.extra = LlamaDecoderLayer(head.lcfg, 1)
        self.extra.load_state_dict(head.layers[0].state_dict())
        for lin in (self.extra.self_attn.o_proj, self.extra.mlp.down_proj):
            torch.nn.init.zeros_(lin.weight)
            if lin.bias is not None:
                torch.nn.init.zeros_(lin.bias)

    def head_in(self, out):
        return self.head.head_in(out)

    def target_in(self, feats):
        return self.head.target_in(feats)

    def forward(self, feat, ids, pos, mask=None, past=None):
        from core.decoding.eagle import self_attention
        B = feat.shape[0]
        p0, p1 = (None, None) if past is None else ((past[0][:B], past[1][:B]), (past[0][B:], past[1][B:]))
        x, (k0, v0) = self.head(feat, ids, pos, mask, p0)
        attn = self.extra.self_attn
        a, (k1, v1) = self_attention(attn, self.extra.input_layernorm(x), self.head.rotary(x, pos), attn.head_dim,
                                     mask, p1)
        x = x + a
        x = x + self.extra.mlp(self.extra.post_attention_layernorm(x))
        return x, (torch.cat([k0, k1]), torch.cat([v0, v1]))


def losses(head, fusion, W_S, X, Fe, w, sigma, tcfg):
    """draft_losses of the arm: the first step reads the fused features (fusion) or f_t alone (None)."""
    d = head.d
    f = Fe[..., :d]
    feat0 = fusion(Fe[:, :-1]) if fusion is not None else None
    return draft_losses(head, W_S, X, f, w, sigma, tcfg, feat0)


def agreement(head, fusion, W, rows, sigma, tcfg) -> dict:
    """Top-1 agreement per depth over the full vocabulary at the answer positions of rows [(ids, feats, start)]."""
    arm = lambda h, W_, X, Fe, w, sig, cfg: losses(h, fusion, W_, X, Fe, w, sig, cfg)
    got = heldout_agreement(head, W, tuple(zip(*rows)), sigma, tcfg, arm)
    return {k: round(v, 4) for k, v in got.items()}


def held_harvest(dirs: str, marker) -> dict:
    """{"harvest": [(ids, feats, response start)]} of held-out harvest dirs (their last-layer features: the arms
    without fusion), {} for none."""
    got = cached_answers([d for d in dirs.split(",") if d], marker) if dirs else None
    return {"harvest": list(zip(*got))} if got else {}


def param_groups(head, fusion, scale) -> list:
    """The head's trained weights at the lr, the arm's new ones (fusion, second layer) at `scale` times it."""
    deep = isinstance(head, Deeper)
    base = head.head if deep else head
    new = list(fusion.parameters()) if fusion is not None else []
    new += list(head.extra.parameters()) if deep else []
    groups = [{"params": [p for p in base.parameters() if p.requires_grad]}]
    return groups + ([{"params": new, "scale": scale}] if new else [])


def train(args) -> int:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = torch.load(os.path.join(args.out, "feats.pt"), mmap=True)  # the arms share the pages
    tcfg = TrainConfig(target=args.target, batch=args.batch, seq_len=args.seq_len, lr=args.lr, depth=3,
                       prompt_w=0.1, steps=args.steps, init=args.init, hard_w=args.hard_w)
    model, tok = load_target(args.target)
    for p in model.parameters():
        p.requires_grad_(False)
    head = new_head(model, tcfg)
    d = head.d
    fusion = Fusion(d, len(data["layers"])) if args.arm == "fused" else None
    head = Deeper(head) if args.arm == "deep" else head
    W = model.get_output_embeddings().weight.detach()
    ids = [x for x, _ in data["train"]]
    feats = [f for _, f in data["train"]]
    marker = response_marker(tok)
    starts = [response_start(x, marker) for x in ids]
    sub = token_subset(ids, W.shape[0], tcfg.vocab_subset - tcfg.negatives)
    sigma = feature_scale([f[:, :d] for f in feats])
    groups = param_groups(head, fusion, args.new_lr_scale)
    opt = torch.optim.AdamW(groups, lr=tcfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng, neg = random.Random(args.seed), torch.Generator().manual_seed(args.seed)
    log = progress_log(os.path.join(args.out, f"{args.arm}{args.tag}.log"))
    held = dict(data["heldout"]) | held_harvest(args.held_cache, marker)
    check = lambda: {k: agreement(head, fusion, W, v, sigma, tcfg) for k, v in held.items()}
    log(f"{args.arm}: layers {data['layers']}, {len(ids)} seqs, {sum(len(x) for x in ids)} tokens; step 0 {check()}")
    t0 = time.time()
    for step in range(args.steps):
        set_lr(opt, lr_at(step, args.steps, tcfg.lr, 20))
        X, Fe, w = sample_batch(ids, feats, tcfg, rng, starts)
        W_S = W[with_batch_ids(with_negatives(sub, W.shape[0], tcfg.negatives, neg), X)]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, st = losses(head, fusion, W_S, X, Fe, w, sigma, tcfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in groups for p in g["params"]], 1.0)
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            log(f"step {step + 1} a1={st['a1']:.3f} {time.time() - t0:.0f} s: {check()}")
    torch.save({"head": head.state_dict(), "fusion": fusion and fusion.state_dict(), "arm": args.arm},
               os.path.join(args.out, f"{args.arm}{args.tag}.pt"))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m core.train.fused", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["features", "train"])
    p.add_argument("--out", required=True)
    p.add_argument("--target", default="smollm2-135m-instruct")
    p.add_argument("--cache", default="", help="harvest dirs (comma list) whose cached sequences are sampled")
    p.add_argument("--heldout", default="", help="a train-eagle heldout.pt (held-out corpus answers)")
    p.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    p.add_argument("--max-new", type=int, default=96)
    p.add_argument("--layers", default="2,15", help="the low and middle layers fused (0-based)")
    p.add_argument("--seqs", type=int, default=4000)
    p.add_argument("--dtype", default="bfloat16", help="the target's dtype while forcing the features")
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--arm", choices=["last", "fused", "deep"], default="fused",
                   help="last: the head as it is; fused: + the --layers' features; deep: + a second decoder layer")
    p.add_argument("--init", default="", help="the head both arms continue: a train-eagle ckpt.pt")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--new-lr-scale", type=float, default=3.0, help="lr scale of the new weights (fusion, layer)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hard-w", type=float, default=0.0, help="weight of the hard-label term (train-eagle --hard-w)")
    p.add_argument("--held-cache", default="", help="held-out harvest dirs (comma list) scored beside feats.pt's sets")
    p.add_argument("--tag", default="", help="appended to the arm's file names (DIR/<arm><tag>.log, .pt)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    return features(args) if args.what == "features" else train(args)


if __name__ == "__main__":
    sys.exit(main())
