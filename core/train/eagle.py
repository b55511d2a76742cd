"""python -m core train-eagle: train an EAGLE head for a target model on CPU.

Data: target features by teacher forcing on corpus prompt+response (default), or, with --self-distill N,
on the target's own greedy generations of N corpus prompts (batched, KV-cached; the features come free from
the generation passes). Both are cached on disk as fp16 shards in DIR/cache (resumable).
Loss per draft depth s (EAGLE-3 training-time test: depth s >= 2 feeds the head its own predicted feature):
  feat_w * SmoothL1(f^/sigma, f/sigma)   (one global scale sigma: scale-robust, keeps f^ on f's scale)
  + tok_w * CE(p_target || q_draft)        over a token subset S (the most frequent ids of the cached data)
Checkpoints DIR/ckpt.pt every --ckpt-min minutes (and every --ckpt-every steps); rerunning the same command
resumes. The training card's tau comes from the engine (Pipeline.run, method full) drafting with the new head.
"""
import glob
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.atomic import write_atomic
from core.spec.eagle import EagleConfig, EagleHead, float_mask, init_from_target, save_head
from core.train.loop import Stopwatch, due, load_checkpoint, lr_at, parse_config, progress_log, save_checkpoint, set_lr


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


def logger(cfg):
    """log(msg) to stdout and DIR/progress.log."""
    return progress_log(os.path.join(cfg.out, "progress.log"))


# ---------------------------------------------------------------- target + prompts

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


def split_pairs(cfg):
    pairs = read_pairs(sorted(sum([glob.glob(p) for p in cfg.data.split(",")], [])))
    random.Random(cfg.seed).shuffle(pairs)
    return pairs[:cfg.n_eval], pairs[cfg.n_eval:]


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


# ---------------------------------------------------------------- feature cache

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
def generate_batch(model, tok, prompts, cfg, hook, max_time=None):
    """Greedy batched generation (left padding, KV cache). Returns [(ids int32 [L], feats fp16 [L, d])].
    max_time: seconds, after which the generations end where they are (transformers' max_time)."""
    seqs = [chat_ids(tok, p)[-cfg.max_prompt:] for p in prompts]
    P = max(len(s) for s in seqs)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (P - len(s)) + s for s in seqs]).to(model.device)
    att = torch.tensor([[0] * (P - len(s)) + [1] * len(s) for s in seqs]).to(model.device)
    hook.take()
    out = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=cfg.max_new, do_sample=False,
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
def teacher_force_batch(model, tok, pairs, cfg, hook):
    seqs = [chat_ids(tok, p, a)[:cfg.max_prompt + cfg.max_new] for p, a in pairs]
    T = max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (T - len(s)) for s in seqs]).to(model.device)
    att = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs]).to(model.device)
    hook.take()
    model.model(input_ids=ids, attention_mask=att)
    feats = hook.take()[0]
    return [(torch.tensor(s, dtype=torch.int32), feats[b, :len(s)].to(torch.float16).cpu()) for b, s in enumerate(seqs)]


def build_cache(model, tok, cfg, pairs):
    """Fill DIR/cache/shard_*.pt (resumable: existing shards are kept)."""
    cdir = os.path.join(cfg.out, "cache")
    os.makedirs(cdir, exist_ok=True)
    n = cfg.self_distill if cfg.self_distill else len(pairs)
    pairs = pairs[:n]
    hook = FeatureHook(model)
    n_shards = math.ceil(len(pairs) / cfg.shard_size)
    have = cached_tokens(cfg.out)
    t0, made = time.time(), 0
    for i in range(n_shards):
        path = os.path.join(cdir, f"shard_{i:05d}.pt")
        if os.path.exists(path):
            continue
        if cfg.max_tokens and have >= cfg.max_tokens or cfg.gen_minutes and time.time() - t0 > cfg.gen_minutes * 60:
            break
        chunk = pairs[i * cfg.shard_size:(i + 1) * cfg.shard_size]
        chunk = sorted(chunk, key=lambda pa: len(pa[0]))  # similar lengths share a batch: less padding
        rows = []
        for j in range(0, len(chunk), cfg.gen_batch):
            part = chunk[j:j + cfg.gen_batch]
            if cfg.self_distill:
                left = cfg.gen_minutes * 60 - (time.time() - t0) if cfg.gen_minutes else None
                rows += generate_batch(model, tok, [p for p, _ in part], cfg, hook, max(left, 1.0) if left else None)
            else:
                rows += teacher_force_batch(model, tok, part, cfg, hook)
        save_rows(path, rows)
        ntok = sum(len(r[0]) for r in rows)
        have += ntok
        made += ntok
        logger(cfg)(f"cache shard {i + 1}/{n_shards}: {ntok} tok, total {have}, {made / (time.time() - t0):.0f} tok/s")
    hook.h.remove()


def save_rows(path, rows) -> None:
    """A cache shard or the held-out set, written atomically: {"ids": [...], "feats": [...]}."""
    write_atomic(path, lambda tmp: torch.save({"ids": [r[0] for r in rows], "feats": [r[1] for r in rows]}, tmp))


def build_heldout(model, tok, cfg, pairs):
    """DIR/heldout.pt: the target's greedy generations of cfg.holdout eval-split prompts (never trained on)."""
    path = os.path.join(cfg.out, "heldout.pt")
    if not cfg.holdout or os.path.exists(path):
        return
    hook = FeatureHook(model)
    rows = []
    for j in range(0, cfg.holdout, cfg.gen_batch):
        rows += generate_batch(model, tok, [p for p, _ in pairs[j:min(j + cfg.gen_batch, cfg.holdout)]], cfg, hook)
    hook.h.remove()
    save_rows(path, rows)
    logger(cfg)(f"held-out: {len(rows)} generations, {sum(len(r[0]) for r in rows)} tok")


def cached_tokens(out):
    n = 0
    for p in glob.glob(os.path.join(out, "cache", "shard_*.pt")):
        n += sum(len(x) for x in torch.load(p)["ids"])
    return n


def load_cache(out):
    ids, feats = [], []
    for p in sorted(glob.glob(os.path.join(out, "cache", "shard_*.pt"))):
        s = torch.load(p)
        ids += s["ids"]
        feats += s["feats"]
    return ids, feats


# ---------------------------------------------------------------- training

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


def target_weights(L, start, prompt_w):
    """Loss weight per target feature f_t [L]: f_t predicts x_{t+1}, a response token iff t >= start - 1."""
    w = torch.full((L,), float(prompt_w))
    w[max(0, start - 1):] = 1.0
    return w


def sample_batch(ids, feats, cfg, rng, starts=None):
    """B random windows of <= seq_len tokens, padded at the end. -> X [B,T], Fe [B,T,d], weight [B,T]
    (0 on padding, cfg.prompt_w on prompt targets when `starts` gives each sequence's response start)."""
    rows = [rng.randrange(len(ids)) for _ in range(cfg.batch)]
    wins = []
    for r in rows:
        L = len(ids[r])
        s = rng.randrange(max(1, L - cfg.seq_len + 1))
        w = target_weights(L, starts[r], cfg.prompt_w) if starts else torch.ones(L)
        wins.append((ids[r][s:s + cfg.seq_len].long(), feats[r][s:s + cfg.seq_len].float(), w[s:s + cfg.seq_len]))
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


def draft_losses(head, W_S, X, Fe, valid, sigma, cfg):
    """EAGLE loss with training-time test over cfg.depth steps. Returns (loss, stats)."""
    B, T = X.shape
    L = T - 1
    Fe = head.target_in(Fe)
    pos = torch.arange(1, L + 1, device=X.device).expand(B, L)
    feat, keys, vals = Fe[:, :L], [], []
    loss, stats = 0.0, {}
    for s in range(1, cfg.depth + 1):
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
        w = 0.8 ** (s - 1)
        loss = loss + w * (cfg.feat_w * lf + cfg.tok_w * lt)
        with torch.no_grad():
            acc = ((logq.argmax(-1) == p.argmax(-1)).float() * m).sum() / n
        stats[f"f{s}"], stats[f"t{s}"], stats[f"a{s}"] = lf.item(), lt.item(), acc.item()
        feat = out
    return loss, stats


def warmup_steps(cfg) -> int:
    return min(50, cfg.steps // 10 + 1)


def save_ckpt(path, head, opt, step, rng, extra):
    save_checkpoint(path, {"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "rng": rng.getstate(),
                           "torch_rng": torch.get_rng_state(), **extra})


def new_head(model, cfg):
    ecfg = EagleConfig(target=cfg.target, final_norm=cfg.final_norm, depth_trained=cfg.depth,
                       feature="pre_norm" if cfg.final_norm else "post_norm")
    head = init_from_target(EagleHead(model.config, ecfg), model).to(model.device).attach(model)
    if cfg.init.endswith(".pt"):
        head.load_state_dict(load_checkpoint(cfg.init, map_location=model.device)["head"])
    elif cfg.init:
        from safetensors.torch import load_file
        sd = load_file(os.path.join(cfg.init, "eagle.safetensors"))
        head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    return head


@torch.no_grad()
def heldout_agreement(head, W, held, sigma, cfg):
    """Top-1 agreement with the target over the FULL vocabulary on the held-out generations' response
    targets only, per training-time-test depth (teacher-forced features, as in draft_losses)."""
    ids, feats, starts = held
    tot, n = {}, 0.0
    for x, f, s in zip(ids, feats, starts):
        w = target_weights(len(x), s, 0.0)[None].to(W.device)
        with torch.autocast(W.device.type, dtype=torch.bfloat16, enabled=cfg.amp):
            _, st = draft_losses(head, W, x.long()[None].to(W.device), f.float()[None].to(W.device), w, sigma, cfg)
        k = float(w[0, 1:].sum())
        for key in st:
            if key.startswith("a"):
                tot[key] = tot.get(key, 0.0) + st[key] * k
        n += k
    return {"h" + k[1:]: v / max(n, 1.0) for k, v in sorted(tot.items())}


def agreement_text(d) -> str:
    return " ".join(f"{k}={v:.3f}" for k, v in d.items() if k != "step")


def load_heldout(cfg, marker):
    """(ids, feats, response starts) of DIR/heldout.pt, or None."""
    path = os.path.join(cfg.out, "heldout.pt")
    if not os.path.exists(path):
        return None
    h = torch.load(path)
    return h["ids"], h["feats"], [response_start(x, marker) for x in h["ids"]]


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


def train_step(head, opt, W_S, batch, sigma, cfg):
    """One AdamW step on the draft losses of `batch` (X, Fe, valid); returns (loss, stats)."""
    X, Fe, valid = batch
    with torch.autocast(X.device.type, dtype=torch.bfloat16, enabled=cfg.amp):
        loss, st = draft_losses(head, W_S, X, Fe, valid, sigma, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    opt.step()
    return loss, st


def finish(model, tok, cfg, head, card) -> dict:
    """After training: the engine's tau with the new head, then DIR/training_card.md; returns the tau table."""
    if card["held"]:
        logger(cfg)(f"held-out response agreement at the end: {agreement_text(card['held'])}")
    prompts, card["eval_src"] = eval_prompts(cfg)
    card["eval_n"] = len(prompts)
    acc = engine_tau(card_pipeline(model, tok, head, cfg.target), prompts) if prompts else {}
    write_card(cfg, card, acc)
    logger(cfg)(f"done: {json.dumps(acc)}")
    return acc


def train(model, tok, cfg):
    log = logger(cfg)
    ids, feats = load_cache(cfg.out)
    ntok = sum(len(i) for i in ids)
    marker = response_marker(tok)
    starts = [response_start(x, marker) for x in ids]
    held = load_heldout(cfg, marker)
    head = new_head(model, cfg)
    W = model.get_output_embeddings().weight.detach()
    sub = token_subset(ids, W.shape[0], cfg.vocab_subset - cfg.negatives if cfg.vocab_subset else 0)
    with torch.no_grad():
        sigma = feature_scale([head.target_in(f.float().to(W.device)) for f in feats[:200]])
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(cfg.seed)
    neg_gen = torch.Generator().manual_seed(cfg.seed)
    ck = os.path.join(cfg.out, "ckpt.pt")
    st = resume(ck, head, opt, rng, neg_gen)
    step, hist = st["step"], st["hist"]
    if step:
        log(f"resumed at step {step}")
    resp = sum(len(x) - s for x, s in zip(ids, starts))
    log(f"train: {len(ids)} seqs, {ntok} tokens ({resp} response), subset {len(sub)}, sigma {sigma:.2f}, steps {cfg.steps}")
    check = lambda: heldout_agreement(head, W, held, sigma, cfg) if held else {}
    held0 = check()
    held_first = st["held0"] or held0
    if held0:
        log(f"held-out response agreement at step {step}: {agreement_text(held0)}")
    from tqdm import tqdm
    bar = tqdm(total=cfg.steps, initial=step, mininterval=10)
    clock, warm = Stopwatch(st["spent"]), warmup_steps(cfg)
    t_ck, t0, seen, run = time.time(), time.time(), 0, st["run"]
    frac = lambda: clock.seconds() / (cfg.minutes * 60) if cfg.minutes else 0.0
    extra = lambda: {"hist": hist, "spent": clock.seconds(), "neg": neg_gen.get_state(), "held0": held_first,
                     "run": run}
    while step < cfg.steps and frac() < 1.0:
        set_lr(opt, lr_at(step, cfg.steps, cfg.lr, warm, frac()))
        batch = tuple(t.to(W.device) for t in sample_batch(ids, feats, cfg, rng, starts))
        W_S = W[with_negatives(sub, W.shape[0], cfg.negatives if cfg.vocab_subset else 0, neg_gen).to(W.device)]
        loss, stats = train_step(head, opt, W_S, batch, sigma, cfg)
        step += 1
        seen += int((batch[2] > 0).sum())
        for k, v in stats.items():
            run[k] = 0.95 * run.get(k, v) + 0.05 * v
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", a1=f"{run['a1']:.3f}")
        if due(step, cfg.log_every, cfg.steps):
            msg = " ".join(f"{k}={v:.3f}" for k, v in sorted(run.items()))
            log(f"step {step}/{cfg.steps} loss={loss.item():.3f} {msg} lr={lr_at(step, cfg.steps, cfg.lr, warm, frac()):.2e} "
                f"{seen / (time.time() - t0):.0f} tok/s, {clock.seconds() / 60:.1f} min")
            hist.append({"step": step, **run})
        if held and step % cfg.eval_every == 0:
            hist.append({"step": step, **check()})
            log(f"held-out response agreement at step {step}: {agreement_text(hist[-1])}")
        if time.time() - t_ck > cfg.ckpt_min * 60 or due(step, cfg.ckpt_every, cfg.steps):
            save_ckpt(ck, head, opt, step, rng, extra())
            t_ck = time.time()
    bar.close()
    save_ckpt(ck, head, opt, step, rng, extra())
    save_head(head, cfg.out)
    card = {"tokens": ntok, "seqs": len(ids), "subset": len(sub), "sigma": sigma, "final": run, "steps": step,
            "minutes": clock.seconds() / 60, "response": resp, "held0": held_first, "held": check()}
    finish(model, tok, cfg, head, card)
    return 0


# ---------------------------------------------------------------- acceptance: the engine with the new head

CARD_SHAPES = {"chain": {"shape": "chain", "gamma": 4}, "tree": {"shape": "tree", "depth": 6, "top_k": 4, "tree_size": 24}}
CARD_MAX_NEW = 64


def eval_prompts(cfg) -> tuple:
    """(the first cfg.eval_prompts shipped prompts, round robin over categories; their source)."""
    from core.prompts import load_prompts
    ps = load_prompts()
    cats = sorted({p.category for p in ps})
    by = [[p.text for p in ps if p.category == c] for c in cats]
    out = [b[i] for i in range(max(len(b) for b in by)) for b in by if i < len(b)]
    return out[:cfg.eval_prompts], "assets/prompts/speclens_prompts.jsonl"


def card_pipeline(model, tok, head, target_id):
    """A Pipeline drafting with `head` for the target `model` on the eager runner: the engine the card's tau
    comes from."""
    from core.spec.eagle import EagleDrafter
    from core.pipeline import Pipeline
    from core.runtime.fast import make_runner
    target = make_runner(model, tok, "eager")
    return Pipeline(target_id, model, tok, target, EagleDrafter(head.eval(), target.head_weight), "eagle")


def engine_tau(pipe, prompts, shapes=None, max_new=CARD_MAX_NEW) -> dict:
    """Per draft shape: tau = the engine's mean accepted length (stats.summarize: tokens per verify step, bonus
    included) over every prompt's steps; greedy, method full, context drafting off (the head alone)."""
    from core.config import SpecConfig
    from core.stats import summarize
    res = {}
    for name, shape in (shapes or CARD_SHAPES).items():
        cfg = SpecConfig(method="full", max_new_tokens=max_new, context="off", **shape).validate()
        s = summarize([r for p in prompts for r in pipe.run(p, cfg)])
        res[name] = {**shape, "prompts": len(prompts), "steps": s["steps"], "tau": s["mean_accept_len"]}
    return res


def tau_row(r) -> str:
    """One row of the card's acceptance table: | shape | verify steps | tau |."""
    shape = f"chain gamma = {r['gamma']}" if r["shape"] == "chain" else f"tree {r['depth']}/{r['top_k']}/{r['tree_size']}"
    return f"| {shape} | {r['steps']} | {r['tau']:.3f} |"


def write_card(cfg, card, acc, path=None):
    """DIR/training_card.md: data, loss, schedule, held-out agreement, and the engine's tau per shape (`acc`)."""
    path = path or os.path.join(cfg.out, "training_card.md")
    lines = [f"# EAGLE head for {cfg.target}", "",
             "One LlamaDecoderLayer (init: the target's last layer) + fc [2d -> d] over [pre-norm last-layer feature; "
             "next-token embedding]; output -> the target's frozen final norm -> the target's LM head W.", "",
             f"- data: {cfg.data}" + (f" (self-distilled: the target's greedy generations, max {cfg.max_new} new tokens, "
                                    f"of {cfg.self_distill} prompts)" if cfg.self_distill else " (teacher forcing on responses)"),
             f"- cached tokens: {card['tokens']} in {card['seqs']} sequences (prompt + response)",
             f"- steps: {card['steps']}, batch {cfg.batch} x seq {cfg.seq_len}, lr {cfg.lr}, seed {cfg.seed}, "
             f"training-time-test depth {cfg.depth}",
             f"- loss: {cfg.feat_w} * SmoothL1(f^/sigma, f/sigma) (sigma = {card['sigma']:.2f}, global) + {cfg.tok_w} * "
             f"CE(p_target || q) over the {card['subset']} most frequent ids of the cache + {cfg.negatives} random other "
             f"ids redrawn each step; depth s weighted 0.8^(s-1); bf16 autocast={cfg.amp}",
             f"- loss weight of prompt/chat-template targets: {cfg.prompt_w} (response targets 1); init: "
             f"{cfg.init or 'the target last layer'}",
             f"- wall clock: {card.get('minutes', 0):.0f} min of training on "
             + ("one CPU thread (shared machine)" if cfg.device == "cpu" else cfg.device),
             "- final running losses: " + ", ".join(f"{k}={v:.3f}" for k, v in sorted(card["final"].items()))
             + "  (f = feature loss, t = token loss, a = top-1 agreement with the target, per depth)",
             f"- held-out response agreement (full vocabulary, {cfg.holdout} self-distilled eval-split prompts, "
             "teacher-forced, per depth): " + ", ".join(f"{k}: {card.get('held0', {}).get(k, float('nan')):.3f} -> {v:.3f}"
                                                       for k, v in card.get("held", {}).items()), "",
             f"## Acceptance (the engine: Pipeline.run, method full, greedy, context drafting off, full-vocabulary "
             f"head W, fp32 target on the eager runner; {card.get('eval_n', 0)} prompts of {card.get('eval_src', '')} x "
             f"{CARD_MAX_NEW} new tokens)", "",
             "tau = the engine's mean accepted length (core.stats.summarize: tokens per verify step, bonus included).", "",
             "| shape | verify steps | tau |", "|---|---|---|"]
    for r in acc.values():
        lines.append(tau_row(r))
    write_atomic(path, "\n".join(lines) + "\n")


# ---------------------------------------------------------------- CLI

def tau_only(cfg) -> int:
    """Print the card's acceptance table (engine_tau) of the saved head in cfg.init."""
    from core.spec.eagle import load_head
    from core.errors import SpecError
    if not os.path.isfile(os.path.join(cfg.init, "eagle.safetensors")):
        raise SpecError(f"--tau-only needs --init DIR holding eagle.safetensors, got {cfg.init!r}")
    model, tok = load_target(cfg.target, cfg.device)
    prompts, src = eval_prompts(cfg)
    acc = engine_tau(card_pipeline(model, tok, load_head(cfg.init, model).to(model.device), cfg.target), prompts)
    print(f"{len(prompts)} prompts of {src} x {CARD_MAX_NEW} new tokens")
    for r in acc.values():
        print(tau_row(r))
    return 0


def main(argv=None):
    cfg = parse_config(TrainConfig, sys.argv[1:] if argv is None else argv, "python -m core train-eagle")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    if cfg.tau_only:
        return tau_only(cfg)
    os.makedirs(cfg.out, exist_ok=True)
    model, tok = load_target(cfg.target, cfg.device)
    for p in model.parameters():
        p.requires_grad_(False)
    ev, tr = split_pairs(cfg)
    build_cache(model.to(getattr(torch, cfg.cache_dtype)), tok, cfg, tr)
    build_heldout(model, tok, cfg, ev)
    model, tok = load_target(cfg.target, cfg.device)  # the exact fp32 target again (a bf16 round trip would round W)
    for p in model.parameters():
        p.requires_grad_(False)
    if cfg.cache_only:
        return 0
    return train(model, tok, cfg)


if __name__ == "__main__":
    sys.exit(main())
