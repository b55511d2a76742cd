"""python -m core train-eagle: train an EAGLE head for a target model on CPU.

Data (core/train/data.py): target features by teacher forcing on corpus prompt+response (default), or, with
--self-distill N, on the target's own greedy generations of N corpus prompts (batched, KV-cached; the features come
free from the generation passes). Both are cached on disk as fp16 shards in DIR/cache (resumable).
Loss per draft depth s (EAGLE-3 training-time test: depth s >= 2 feeds the head its own predicted feature):
  feat_w * SmoothL1(f^/sigma, f/sigma)   (one global scale sigma: scale-robust, keeps f^ on f's scale)
  + tok_w * (CE(p_target || q_draft)       over a token subset S (the most frequent ids of the cached data, random
                                           other ids redrawn each step and the batch's own token ids)
             + hard_w * CE(argmax p_target, q_draft))   (the argmax alone: what a greedy verify accepts)
Checkpoints DIR/ckpt.pt every --ckpt-min minutes (and every --ckpt-every steps); rerunning the same command
resumes. The training card's tau (core/train/card.py) comes from the engine (Pipeline.run, method full) drafting with the new head.
"""
import json
import os
import random
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.decoding.eagle import EagleConfig, EagleHead, float_mask, init_from_target
from core.decoding.eagle_io import save_head
from core.errors import SpecError
from core.train.card import CARD_MAX_NEW, card_pipeline, engine_tau, eval_prompts, tau_row, write_card
from core.train.data import (
    build_cache,
    build_heldout,
    cache_dirs,
    load_cache,
    load_heldout,
    load_target,
    response_marker,
    response_start,
    split_pairs,
)
from core.train.loop import (
    Stopwatch,
    due,
    load_checkpoint,
    logger,
    lr_at,
    parse_config,
    save_checkpoint,
    set_lr,
)


@dataclass
class TrainConfig:
    target: str = "smollm2-135m-instruct"
    data: str = ""
    out: str = ""
    steps: int = 2000
    batch: int = 8
    seq_len: int = 256
    lr: float = 3e-4
    seed: int = 0
    self_distill: int = 0         # N prompts -> greedy generations (0 = teacher forcing on responses)
    max_new: int = 192
    max_prompt: int = 384
    gen_batch: int = 32
    shard_size: int = 64
    n_eval: int = 32              # held-out prompts (first of the shuffled list) for the acceptance check
    depth: int = 2                # training-time test depth
    feat_w: float = 1.0
    tok_w: float = 1.0
    hard_w: float = 0.0           # + CE(q_draft, argmax p_target): the greedy verify accepts the argmax alone
    vocab_subset: int = 8192      # token loss over the most frequent ids + random negatives (0 = full vocabulary)
    negatives: int = 1024         # of vocab_subset: fresh random other ids each step, so the rest of W stays low
    final_norm: bool = True
    threads: int = 1
    ckpt_min: float = 5.0
    eval_prompts: int = 14
    minutes: float = 0.0          # wall-clock training budget: stop (and anneal the lr) by time, not steps
    max_tokens: int = 0           # stop data generation at this many cached tokens (0 = no limit)
    cache_dtype: str = "bfloat16" # target dtype while building the cache (AMX bf16 is ~2x fp32 on this CPU)
    amp: bool = True              # bf16 autocast for the training matmuls (fp32 master weights)
    prompt_w: float = 1.0         # loss weight of prompt/chat-template targets (response targets: 1)
    init: str = ""                # start from a head: a train-eagle ckpt.pt or a dir with eagle.safetensors
    holdout: int = 0              # held-out prompts of the eval split, self-distilled, for the response agreement
    eval_every: int = 100         # steps between held-out response agreement checks
    device: str = "cpu"           # where the target, the cache generation and the training run (cpu | cuda)
    gen_minutes: float = 0.0      # wall-clock budget of the data generation (0 = no limit; finished shards stay)
    ckpt_every: int = 0           # also checkpoint every N steps (0 = by --ckpt-min only)
    log_every: int = 25           # steps between progress lines
    cache_only: bool = False      # build the feature cache (and held-out set), then stop
    tau_only: bool = False        # only measure the card's tau of the head in --init (a dir) with the engine
    extra_cache: str = ""         # more harvest dirs (comma list) whose cache/ shards are trained on too
    follow: float = 0.0           # minutes between looks for new cache shards (a harvest writing them beside; 0: never)
    held_cache: str = ""          # harvest dirs (comma list) whose cache/ shards are held out: agreement m1.. beside h1..


def feature_scale(feats, n=200):
    """One global scale sigma = RMS of the cached features (per-dimension scaling hurt)."""
    x = torch.cat([f.float() for f in feats[:n]])
    return float(x.pow(2).mean().sqrt())


def token_subset(ids, V, k):
    """The k most frequent ids of the cached data (k = 0: whole vocabulary)."""
    if not k or k >= V:
        return torch.arange(V)
    counts = torch.bincount(torch.cat([i.long() for i in ids]), minlength=V)
    return counts.topk(k).indices.sort().values


def with_negatives(sub, V, n, gen):
    """sub + n random ids outside it (redrawn every step)."""
    if n <= 0 or len(sub) >= V:
        return sub
    out = torch.ones(V, dtype=torch.bool)
    out[sub] = False
    others = out.nonzero().view(-1)
    return torch.cat([sub, others[torch.randperm(len(others), generator=gen)[:n]]])


def with_batch_ids(ids, X):
    """ids + the batch's token ids not among them: the target's own next tokens (its top-1 on self-distilled answers)
    are always scored, however rare."""
    seen = X.unique()
    return torch.cat([ids, seen[~torch.isin(seen, ids)]])


def target_weights(L, start, prompt_w):
    """Loss weight per target feature f_t [L]: f_t predicts x_{t+1}, a response token iff t >= start - 1."""
    w = torch.full((L,), float(prompt_w))
    w[max(0, start - 1):] = 1.0
    return w


def sample_batch(ids, feats, tcfg, rng, starts=None):
    """B random windows of <= seq_len tokens, padded at the end. -> X [B,T], Fe [B,T,d], weight [B,T]
    (0 on padding, tcfg.prompt_w on prompt targets when `starts` gives each sequence's response start)."""
    rows = [rng.randrange(len(ids)) for _ in range(tcfg.batch)]
    wins = []
    for r in rows:
        L = len(ids[r])
        s = rng.randrange(max(1, L - tcfg.seq_len + 1))
        w = target_weights(L, starts[r], tcfg.prompt_w) if starts else torch.ones(L)
        wins.append((ids[r][s:s + tcfg.seq_len].long(), feats[r][s:s + tcfg.seq_len].float(), w[s:s + tcfg.seq_len]))
    T = max(len(w[0]) for w in wins)
    X = torch.zeros(len(wins), T, dtype=torch.long)
    Fe = torch.zeros(len(wins), T, feats[0].shape[-1])
    weight = torch.zeros(len(wins), T)
    for b, (x, f, w) in enumerate(wins):
        X[b, :len(x)], Fe[b, :len(x)], weight[b, :len(x)] = x, f, w
    return X, Fe, weight


def ttt_mask(L, s):
    """Step-s queries [L] over keys [step1 L | step2 L | ... | step s L]: causal on step 1, diagonal deeper."""
    vis = [torch.ones(L, L, dtype=torch.bool).tril()] + [torch.eye(L, dtype=torch.bool)] * (s - 1)
    return float_mask(torch.cat(vis, 1))[None, None]


def shift(x, s, fill=0):
    """x [B, T, ...] -> x[:, s:s+L] padded at the end with `fill` to L = T - 1 rows."""
    L = x.shape[1] - 1
    out = x[:, s:s + L]
    if out.shape[1] < L:
        pad = torch.full((x.shape[0], L - out.shape[1], *x.shape[2:]), fill, dtype=x.dtype, device=x.device)
        out = torch.cat([out, pad], 1)
    return out


def draft_losses(head, W_S, X, Fe, valid, sigma, tcfg, feat0=None):
    """EAGLE loss with training-time test over tcfg.depth steps. Returns (loss, stats).
    feat0 [B, T-1, d]: the first step's input features where they are not the target features themselves."""
    B, T = X.shape
    L = T - 1
    Fe = head.target_in(Fe)
    pos = torch.arange(1, L + 1, device=X.device).expand(B, L)
    feat, keys, vals = Fe[:, :L] if feat0 is None else feat0, [], []
    loss, stats = 0.0, {}
    for s in range(1, tcfg.depth + 1):
        ids, tgt = shift(X, s), shift(Fe, s)
        ok = shift(valid, s, 0)
        mask = None if s == 1 else ttt_mask(L, s).to(X.device)
        past = None if s == 1 else (torch.cat(keys, 2), torch.cat(vals, 2))
        out, (k, v) = head(feat, ids, pos + (s - 1), mask, past)
        keys.append(k), vals.append(v)
        m = ok.float()
        n = m.sum().clamp(min=1)
        lf = (F.smooth_l1_loss(out / sigma, tgt / sigma, reduction="none").mean(-1) * m).sum() / n
        logq = F.log_softmax(head.head_in(out) @ W_S.T, -1)
        with torch.no_grad():
            p = F.softmax(head.head_in(tgt) @ W_S.T, -1)
        lt = (-(p * logq).sum(-1) * m).sum() / n
        if tcfg.hard_w:
            lt = lt + tcfg.hard_w * (-logq.gather(-1, p.argmax(-1, keepdim=True))[..., 0] * m).sum() / n
        w = 0.8 ** (s - 1)
        loss = loss + w * (tcfg.feat_w * lf + tcfg.tok_w * lt)
        with torch.no_grad():
            acc = ((logq.argmax(-1) == p.argmax(-1)).float() * m).sum() / n
        stats[f"f{s}"], stats[f"t{s}"], stats[f"a{s}"] = lf.item(), lt.item(), acc.item()
        feat = out
    return loss, stats


def follow_cache(out, ids, feats, starts, loaded, marker, log) -> int:
    """Append the cache shards written since `loaded` (a harvest beside the training) to ids/feats/starts in place;
    returns the tokens added."""
    new_ids, new_feats, paths = load_cache(out, set(loaded))
    if not paths:
        return 0
    ids += new_ids
    feats += new_feats
    starts += [response_start(x, marker) for x in new_ids]
    loaded += paths
    n = sum(len(x) for x in new_ids)
    log(f"follow: {len(paths)} new shards, {n} tokens; {len(ids)} seqs now")
    return n


def warmup_steps(tcfg) -> int:
    return min(50, tcfg.steps // 10 + 1)


def save_ckpt(path, head, opt, step, rng, extra):
    save_checkpoint(path, {"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng.getstate(),
                           "torch_rng": torch.get_rng_state(), **extra})


def new_head(model, tcfg):
    ecfg = EagleConfig(target=tcfg.target, final_norm=tcfg.final_norm, depth_trained=tcfg.depth,
                       feature="pre_norm" if tcfg.final_norm else "post_norm")
    head = init_from_target(EagleHead(model.config, ecfg), model).to(model.device).attach(model)
    if tcfg.init.endswith(".pt"):
        head.load_state_dict(load_checkpoint(tcfg.init, map_location=model.device)["head"])
    elif tcfg.init:
        from safetensors.torch import load_file
        sd = load_file(os.path.join(tcfg.init, "eagle.safetensors"))
        head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    return head


@torch.no_grad()
def heldout_agreement(head, W, held, sigma, tcfg, losses=draft_losses, prefix="h"):
    """Top-1 agreement with the target over the FULL vocabulary on the held-out generations' response
    targets only, per training-time-test depth, keyed prefix + depth (teacher-forced features, as in draft_losses;
    `losses` takes draft_losses' first seven arguments)."""
    ids, feats, starts = held
    tot, n = {}, 0.0
    for x, f, s in zip(ids, feats, starts):
        w = target_weights(len(x), s, 0.0)[None].to(W.device)
        with torch.autocast(W.device.type, dtype=torch.bfloat16, enabled=tcfg.amp):
            _, st = losses(head, W, x.long()[None].to(W.device), f.float()[None].to(W.device), w, sigma, tcfg)
        k = float(w[0, 1:].sum())
        for key in st:
            if key.startswith("a"):
                tot[key] = tot.get(key, 0.0) + st[key] * k
        n += k
    return {prefix + k[1:]: v / max(n, 1.0) for k, v in sorted(tot.items())}


def held_sets(tcfg, marker) -> dict:
    """{"h": DIR/heldout.pt's (ids, feats, response starts), "m": --held-cache's shards'}, those there are."""
    sets = {"h": load_heldout(tcfg, marker)}
    if tcfg.held_cache:
        dirs = [d for d in tcfg.held_cache.split(",") if d]
        shared = {os.path.realpath(os.path.join(d, "cache")) for d in dirs} & \
            {os.path.realpath(os.path.join(d, "cache")) for d in cache_dirs(tcfg)}
        if shared:
            raise SpecError(f"--held-cache {tcfg.held_cache}: {', '.join(sorted(shared))} is trained on too")
        sets["m"] = cached_answers(dirs, marker)
    return {k: v for k, v in sets.items() if v}


def cached_answers(dirs: list, marker) -> tuple | None:
    """(ids, feats, response starts) of the shards cached in harvest dirs, None where they hold none."""
    ids, feats, _ = load_cache(dirs)
    return (ids, feats, [response_start(x, marker) for x in ids]) if ids else None


def held_agreement(head, W, sets, sigma, tcfg) -> dict:
    return {k: v for name, held in sets.items() for k, v in heldout_agreement(head, W, held, sigma, tcfg,
                                                                              prefix=name).items()}


def agreement_text(d) -> str:
    return " ".join(f"{k}={v:.3f}" for k, v in d.items() if k != "step")


def resume(path, head, opt, rng, neg_gen) -> dict:
    """{step, hist, spent, held0, run}: from the checkpoint at `path` (head, optimizer and RNGs restored), else
    fresh (run: the running means of the losses)."""
    c = load_checkpoint(path)
    if c is None:
        return {"step": 0, "hist": [], "spent": 0.0, "held0": {}, "run": {}}
    head.load_state_dict(c["head"]), opt.load_state_dict(c["opt"])
    rng.setstate(c["rng"]), torch.set_rng_state(c["torch_rng"])
    neg_gen.set_state(c["neg"])
    return {"step": c["step"], "hist": c.get("hist", []), "spent": c.get("spent", 0.0), "held0": c.get("held0", {}),
            "run": c.get("run", {})}


def train_step(head, opt, W_S, batch, sigma, tcfg):
    """One AdamW step on the draft losses of `batch` (X, Fe, valid); returns (loss, stats)."""
    X, Fe, valid = batch
    with torch.autocast(X.device.type, dtype=torch.bfloat16, enabled=tcfg.amp):
        loss, st = draft_losses(head, W_S, X, Fe, valid, sigma, tcfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    opt.step()
    return loss, st


def finish(model, tok, tcfg, head, card) -> dict:
    """After training: the engine's tau with the new head, then DIR/training_card.md; returns the tau table."""
    if card["held"]:
        logger(tcfg)(f"held-out response agreement at the end: {agreement_text(card['held'])}")
    prompts, card["eval_src"] = eval_prompts(tcfg)
    card["eval_n"] = len(prompts)
    acc = engine_tau(card_pipeline(model, tok, head, tcfg.target), prompts) if prompts else {}
    write_card(tcfg, card, acc)
    logger(tcfg)(f"done: {json.dumps(acc)}")
    return acc


def train(model, tok, tcfg):
    log = logger(tcfg)
    ids, feats, loaded = load_cache(cache_dirs(tcfg))
    ntok = sum(len(i) for i in ids)
    marker = response_marker(tok)
    starts = [response_start(x, marker) for x in ids]
    t_follow = time.time()
    held = held_sets(tcfg, marker)
    head = new_head(model, tcfg)
    W = model.get_output_embeddings().weight.detach()
    sub = token_subset(ids, W.shape[0], tcfg.vocab_subset - tcfg.negatives if tcfg.vocab_subset else 0)
    with torch.no_grad():
        sigma = feature_scale([head.target_in(f.float().to(W.device)) for f in feats[:200]])
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=tcfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(tcfg.seed)
    neg_gen = torch.Generator().manual_seed(tcfg.seed)
    ck = os.path.join(tcfg.out, "ckpt.pt")
    st = resume(ck, head, opt, rng, neg_gen)
    step, hist = st["step"], st["hist"]
    if step:
        log(f"resumed at step {step}")
    resp = sum(len(x) - s for x, s in zip(ids, starts))
    log(f"train: {len(ids)} seqs, {ntok} tokens ({resp} response), subset {len(sub)}, sigma {sigma:.2f}, steps {tcfg.steps}")
    check = lambda: held_agreement(head, W, held, sigma, tcfg)
    held0 = check()
    held_first = st["held0"] or held0
    if held0:
        log(f"held-out response agreement at step {step}: {agreement_text(held0)}")
    from tqdm import tqdm
    bar = tqdm(total=tcfg.steps, initial=step, mininterval=10)
    clock, warm = Stopwatch(st["spent"]), warmup_steps(tcfg)
    t_ck, t0, seen, run = time.time(), time.time(), 0, st["run"]
    frac = lambda: clock.seconds() / (tcfg.minutes * 60) if tcfg.minutes else 0.0
    extra = lambda: {"hist": hist, "spent": clock.seconds(), "neg": neg_gen.get_state(), "held0": held_first,
                     "run": run}
    while step < tcfg.steps and frac() < 1.0:
        set_lr(opt, lr_at(step, tcfg.steps, tcfg.lr, warm, frac()))
        batch = tuple(t.to(W.device) for t in sample_batch(ids, feats, tcfg, rng, starts))
        S = with_negatives(sub, W.shape[0], tcfg.negatives if tcfg.vocab_subset else 0, neg_gen)
        W_S = W[(with_batch_ids(S, batch[0].cpu()) if tcfg.vocab_subset else S).to(W.device)]
        loss, stats = train_step(head, opt, W_S, batch, sigma, tcfg)
        step += 1
        seen += int((batch[2] > 0).sum())
        for k, v in stats.items():
            run[k] = 0.95 * run.get(k, v) + 0.05 * v
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", a1=f"{run['a1']:.3f}")
        if due(step, tcfg.log_every, tcfg.steps):
            msg = " ".join(f"{k}={v:.3f}" for k, v in sorted(run.items()))
            log(f"step {step}/{tcfg.steps} loss={loss.item():.3f} {msg} lr={lr_at(step, tcfg.steps, tcfg.lr, warm, frac()):.2e} "
                f"{seen / (time.time() - t0):.0f} tok/s, {clock.seconds() / 60:.1f} min")
            hist.append({"step": step, **run})
        if held and step % tcfg.eval_every == 0:
            hist.append({"step": step, **check()})
            log(f"held-out response agreement at step {step}: {agreement_text(hist[-1])}")
        if tcfg.follow and time.time() - t_follow > tcfg.follow * 60:
            follow_cache(cache_dirs(tcfg), ids, feats, starts, loaded, marker, log)
            t_follow = time.time()
        if time.time() - t_ck > tcfg.ckpt_min * 60 or due(step, tcfg.ckpt_every, tcfg.steps):
            save_ckpt(ck, head, opt, step, rng, extra())
            t_ck = time.time()
    bar.close()
    save_ckpt(ck, head, opt, step, rng, extra())
    save_head(head, tcfg.out)
    card = {"tokens": sum(len(i) for i in ids), "seqs": len(ids), "subset": len(sub), "sigma": sigma, "final": run, "steps": step,
            "minutes": clock.seconds() / 60, "response": sum(len(x) - s for x, s in zip(ids, starts)), "held0": held_first, "held": check()}
    finish(model, tok, tcfg, head, card)
    return 0


def tau_only(tcfg) -> int:
    """Print the card's acceptance table (engine_tau) of the saved head in tcfg.init."""
    from core.decoding.eagle_io import load_head
    if not os.path.isfile(os.path.join(tcfg.init, "eagle.safetensors")):
        raise SpecError(f"--tau-only needs --init DIR holding eagle.safetensors, got {tcfg.init!r}")
    model, tok = load_target(tcfg.target, tcfg.device)
    prompts, src = eval_prompts(tcfg)
    acc = engine_tau(card_pipeline(model, tok, load_head(tcfg.init, model).to(model.device), tcfg.target), prompts)
    print(f"{len(prompts)} prompts of {src} x {CARD_MAX_NEW} new tokens")
    for r in acc.values():
        print(tau_row(r))
    return 0


def main(argv=None):
    tcfg = parse_config(TrainConfig, sys.argv[1:] if argv is None else argv, "python -m core train-eagle")
    torch.set_num_threads(tcfg.threads)
    torch.manual_seed(tcfg.seed)
    if tcfg.tau_only:
        return tau_only(tcfg)
    os.makedirs(tcfg.out, exist_ok=True)
    model, tok = load_target(tcfg.target, tcfg.device)
    for p in model.parameters():
        p.requires_grad_(False)
    ev, tr = split_pairs(tcfg)
    build_cache(model.to(getattr(torch, tcfg.cache_dtype)), tok, tcfg, tr)
    build_heldout(model, tok, tcfg, ev)
    model, tok = load_target(tcfg.target, tcfg.device)  # the exact fp32 target again (a bf16 round trip would round W)
    for p in model.parameters():
        p.requires_grad_(False)
    if tcfg.cache_only:
        return 0
    return train(model, tok, tcfg)


if __name__ == "__main__":
    sys.exit(main())
