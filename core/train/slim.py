"""python -m core train-slim --head DIR --rank r [--out DIR]: SlimSpec low-rank factors of the draft LM head.

W [V, d] ~ W_up [V, r] @ W_down [r, d]: initialised by truncated SVD of W, then trained with Adam on forward
KL(softmax(W h) || softmax(W_up W_down h)) (+ --ce-w x cross-entropy of the low-rank head at the full head's
argmax) over head inputs h: the EAGLE head's outputs on the cached training data (--head DIR), or a model's own
final hidden states on teacher-forced corpus responses (--head MODEL: factors of that model's LM head, for it as a
draft model). lr: linear warmup, then cosine down to 10%. A long run is resumable: every --ckpt-every steps
OUT/slim_ckpt.pt (factors, Adam state, step, batch RNG) is written atomically and a rerun with the same settings
continues from it (--steps may be raised); a model's inputs are kept in OUT/slim_inputs.pt; progress goes to
OUT/slim_progress.log, held-out KL / top-1 agreement / top-512 recall every --eval-every steps.
--rows tied trains W_up = W K^T instead of free rows (K [r, d]): every row, rare tokens' too, then follows its own row
of W, so the full head's argmax stays in the low-rank top-M on text unlike the training data (what rescoring needs);
it starts from the data-aware SVD (whitened_svd), not the plain one.
Writes OUT/slim_r{r}.safetensors (fp16 W_up, W_down; tied rows: fp32 K, fp16 W_down; slim_own_r{r} for --head
MODEL) and appends a line to OUT/training_card.md.
"""
import json
import os
import random
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from core.decoding.heads import svd_factors
from core.errors import SpecError
from core.paths import write_atomic
from core.pipeline import head_dir, slim_file
from core.train.loop import Stopwatch, due, load_checkpoint, lr_at, parse_config, progress_log, save_checkpoint, set_lr


@dataclass
class SlimConfig:
    head: str = field(metadata={"help": "an EAGLE head's dir (eagle.safetensors + config.json), or a draft model's "
                                        "id or alias (its own LM head, on its final hidden states)"})
    out: str | None = field(default=None, metadata={"help": "output dir (default: --head's dir, or "
                                                              "runs/slim/<model>)"})
    rank: int = field(default=0, metadata={"help": "r (0 = d/8)"})
    cache: str = field(default="runs/eagle_smollm2", metadata={"help": "train-eagle --out dir holding cache/"})
    data: str = field(default="../shared/data/instructions_*.jsonl", metadata={
        "help": "a draft model's corpus: prompt/response JSONL globs, comma-separated"})
    tokens: int = 20000
    steps: int = 400
    batch: int = 256
    lr: float = field(default=1e-3, metadata={"help": "peak lr (warmup, then cosine to 10%%)"})
    warmup: int | None = field(default=None, metadata={"help": "warmup steps (default: min(100, steps/20))"})
    ce_w: float = field(default=0.0, metadata={"help": "weight of CE at the full head's argmax"})
    rows: str = field(default="free", metadata={"help": "free: W_up [V, r] trained row by row; tied: W_up = W K^T, "
                                                         "K [r, d] trained (from the data-aware SVD)"})
    ckpt_every: int = 100
    eval_every: int = 250
    seed: int = 0
    threads: int = 1


ROWS = ("free", "tied")
RECALL_M = 512  # the rescoring default's top-M (core/models.py)


def svd_init(W, r):
    """fp32 factors of the truncated SVD of W, computed in fp64."""
    return tuple(x.float() for x in svd_factors(W.double(), r))


def sqrt_sym(A, inverse=False, floor=1e-9):
    """A^{1/2} (or A^{-1/2}) of a symmetric PSD matrix, eigenvalues floored at floor * the largest."""
    e, Q = torch.linalg.eigh(A)
    e = e.clamp_min(e.max() * floor)
    return (Q * (e.rsqrt() if inverse else e.sqrt())) @ Q.T


def whitened_svd(W, h, r):
    """fp32 (K [r, d], W_down [r, d]) of the data-aware SVD, W_up = W K^T: the rank-r M = W_down^T K that minimises
    E_h ||h W^T - h M W^T||^2 over the inputs h (every logit weighted alike, rare tokens' too). With C = E[h^T h],
    G = W^T W and C^{1/2} G^{1/2} = U S V^T: M = C^{-1/2} U_r U_r^T C^{1/2}. Computed in fp64."""
    h64, W64 = h.double(), W.double()
    C, G = h64.T @ h64 / len(h64), W64.T @ W64
    Ch = sqrt_sym(C)
    U = torch.linalg.svd(Ch @ sqrt_sym(G))[0][:, :r]
    return (U.T @ Ch).float().contiguous(), (U.T @ sqrt_sym(C, inverse=True)).float().contiguous()


def up_of(W, first, rows: str):
    """W_up from the first trained factor: itself (free rows) or W K^T (tied)."""
    return W @ first.T if rows == "tied" else first


@torch.no_grad()
def head_inputs(head, ids, feats, n_tokens, seed):
    """h [N, d]: the EAGLE head's LM-head inputs on random cached sequences (teacher-forced features)."""
    order = list(range(len(ids)))
    random.Random(seed).shuffle(order)
    hs, n, dev = [], 0, head.fc.weight.device
    for i in order:
        x, f = ids[i].long().to(dev), head.target_in(feats[i].float().to(dev))
        L = len(x) - 1
        if L < 1:
            continue
        out, _ = head(f[None, :L], x[None, 1:], torch.arange(1, L + 1, device=dev)[None])
        hs.append(head.head_in(out[0]))
        n += L
        if n >= n_tokens:
            break
    return torch.cat(hs)[:n_tokens]


def kl_stats(W, up, down, h, m=RECALL_M):
    """forward KL(full || low-rank) per token, top-1 agreement, and top-m recall: how often the full head's argmax is
    among the low-rank head's m highest logits (what rescoring the top m needs)."""
    logp = F.log_softmax(h @ W.T, -1)
    logq = F.log_softmax((h @ down.T) @ up.T, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    best = logp.argmax(-1, keepdim=True)
    recall = ((logq > logq.gather(1, best)).sum(-1) < m).float().mean()
    return kl, (best[:, 0] == logq.argmax(-1)).float().mean(), recall


def slim_loss(W, up, down, h, ce_w):
    """(loss, KL): forward KL(full || low-rank) per token + ce_w * CE(low-rank || the full head's argmax)."""
    with torch.no_grad():
        logp = F.log_softmax(h @ W.T, -1)  # [n, V]
    logq = F.log_softmax((h @ down.T) @ up.T, -1)  # [n, r] -> [n, V]
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    if not ce_w:
        return kl, kl
    return kl + ce_w * F.nll_loss(logq, logp.argmax(-1)), kl


@torch.no_grad()
def held_out(W, up, down, val, chunk=512):
    """[KL, top-1 agreement, top-512 recall] of the factors over the held-out inputs, `chunk` rows at a time."""
    total = [0.0, 0.0, 0.0]
    for i in range(0, len(val), chunk):
        n = len(val[i:i + chunk])
        total = [t + float(x) * n for t, x in zip(total, kl_stats(W, up, down, val[i:i + chunk]))]
    return [t / len(val) for t in total]


def split_val(h):
    """(held-out, train) rows of h: the first min(2048, N/5) rows are held out (whole sequences, mostly)."""
    n_val = min(2048, len(h) // 5)
    return h[:n_val], h[n_val:]


def write_ckpt(path, first, down, opt, gen, state, settings):
    save_checkpoint(path, {"up": first.detach(), "down": down.detach(), "opt": opt.state_dict(),
                           "rng": gen.get_state(), "state": dict(state), "settings": settings})


def check_rows(rows: str, init=None) -> None:
    if rows not in ROWS:
        raise SpecError(f"train-slim: --rows must be one of {', '.join(ROWS)}, got {rows!r}")
    if rows == "tied" and init is not None:
        raise SpecError("train-slim: tied rows start from the data-aware SVD, not from given (W_up, W_down)")


def first_factors(W, h, r, rows, init=None):
    """fp32 (first, W_down) to train: `init` (W_up, W_down) given (free rows), else SVD (free rows) or the
    data-aware SVD's (K, W_down) (tied rows)."""
    if init is not None:
        return [x.to(W.device, torch.float32).clone() for x in init]
    return list(whitened_svd(W, h, r) if rows == "tied" else svd_init(W, r))


def start(W, h, r, lr, seed, ckpt, settings, init=None, rows="free"):
    """(first, down, opt, gen, state): resumed from the checkpoint at `ckpt` if there is one (its Adam state keeps
    each group's lr scale), else from first_factors. first is W_up (free rows) or K (tied rows, W_up = W K^T); tied
    factors step at lr times their own initial RMS."""
    check_rows(rows, init)
    ck = load_checkpoint(ckpt, settings)
    factors = [ck["up"].clone(), ck["down"].clone()] if ck is not None else first_factors(W, h, r, rows, init)
    first, down = (x.requires_grad_() for x in factors)
    scale = [float(x.detach().pow(2).mean().sqrt()) if rows == "tied" else 1.0 for x in (first, down)]
    opt = torch.optim.Adam([{"params": [x], "scale": s} for x, s in zip((first, down), scale)], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    state = {"step": 0, "elapsed": 0.0, "before": None}
    if ck is not None:
        opt.load_state_dict(ck["opt"])
        gen.set_state(ck["rng"])
        state = ck["state"]
    return first, down, opt, gen, state


def train_step(W, first, down, opt, hb, lr, ce_w, rows):
    set_lr(opt, lr)
    loss, kl = slim_loss(W, up_of(W, first, rows), down, hb, ce_w)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return kl.item()


def train_factors(W, h, r, steps, batch, lr, seed, log=print, ce_w=0.0, warmup=None, ckpt=None,
                  ckpt_every=250, eval_every=250, log_every=50, settings=None, max_seconds=None, init=None,
                  rows="free"):
    """Trained (W_up, W_down, held-out [KL, top-1, top-512 recall] at init, after); resumes from / writes `ckpt`.
    max_seconds: stop earlier once this much training time has passed (the schedule still spans `steps`);
    init: (W_up, W_down) to start from instead of the SVD (e.g. the factors of the head this one was tuned from);
    rows: "free" or "tied" (W_up = W K^T)."""
    settings = settings or {}
    val, tr = split_val(h)
    warmup = min(100, max(1, steps // 20)) if warmup is None else warmup
    first, down, opt, gen, st = start(W, tr, r, lr, seed, ckpt, settings, init, rows)

    def evaluate():
        return held_out(W, up_of(W, first.detach(), rows), down.detach(), val)
    if st["before"] is None:
        st["before"] = evaluate()
        log(f"slim step 0/{steps} held-out {scores(st['before'])}")
    elif st["step"] < steps:
        log(f"slim resumed at step {st['step']}/{steps} ({st['elapsed']:.0f} s done)")
    clock, kls, after = Stopwatch(st["elapsed"]), [], None
    while st["step"] < steps and not (max_seconds and st["elapsed"] > max_seconds):
        rate = lr_at(st["step"], steps, lr, warmup)
        hb = tr[torch.randint(0, len(tr), (batch,), generator=gen)]
        kls.append(train_step(W, first, down, opt, hb, rate, ce_w, rows))
        st["step"] += 1
        st["elapsed"] = clock.seconds()
        s = st["step"]
        if due(s, log_every, steps):
            log(f"slim step {s}/{steps} kl={sum(kls) / len(kls):.4f} lr={rate:.2e} elapsed={st['elapsed']:.0f}s")
            kls = []
        if due(s, eval_every, steps):
            after = evaluate()
            log(f"slim step {s}/{steps} held-out {scores(after)}")
        if ckpt and due(s, ckpt_every, steps):
            write_ckpt(ckpt, first, down, opt, gen, st, settings)
    up = up_of(W, first.detach(), rows)
    return up, down.detach(), st["before"], after or evaluate()  # the last step's eval


def scores(ev) -> str:
    return f"kl={ev[0]:.4f} top1={ev[1]:.4f} recall{RECALL_M}={ev[2]:.4f}"


def is_eagle_dir(head: str) -> bool:
    return os.path.isfile(os.path.join(head, "eagle.safetensors"))


@torch.no_grad()
def model_inputs(model, tok, pairs, n_tokens, max_len=512, batch=8):
    """h [N, d]: the model's final (normed) hidden states at the response positions of teacher-forced
    (prompt, response) chats, in the given order, until n_tokens."""
    from core.train.data import chat_ids
    hs, n = [], 0
    for i in range(0, len(pairs), batch):
        seqs = [(len(chat_ids(tok, p)), chat_ids(tok, p, a)[:max_len]) for p, a in pairs[i:i + batch]]
        seqs = [(start, s) for start, s in seqs if start < len(s)]  # a response to learn from
        if not seqs:
            continue
        T = max(len(s) for _, s in seqs)
        ids = torch.tensor([s + [0] * (T - len(s)) for _, s in seqs])
        att = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for _, s in seqs])
        out = model.model(input_ids=ids, attention_mask=att).last_hidden_state  # [B, T, d], after the final norm
        for b, (start, s) in enumerate(seqs):
            hs.append(out[b, start:len(s)].float())
            n += len(hs[-1])
        if n >= n_tokens:
            break
    return torch.cat(hs)[:n_tokens]


def load_model_inputs(a):
    """(W [V, d], h [N, d]): a draft model's LM head and its hidden states on a.tokens corpus positions, in the
    dtype the draft runs in (bf16 where the fast runtime is exact in it)."""
    from core.models import load_model
    from core.pipeline import inference_dtype
    from core.train.data import read_globs
    model, tok = load_model(a.head, device="cpu", dtype=inference_dtype("cpu"))
    pairs = read_globs(a.data)
    if not pairs:
        raise SystemExit(f"train-slim: no prompt/response pairs in {a.data}")
    random.Random(a.seed).shuffle(pairs)
    # similar lengths share a batch (less padding)
    pairs = [x for i in range(0, len(pairs), 64) for x in sorted(pairs[i:i + 64], key=lambda pa: len(pa[0] + pa[1]))]
    W = model.get_output_embeddings().weight.detach().float()
    key = {"head": a.head, "data": a.data, "tokens": a.tokens, "seed": a.seed}
    path = os.path.join(out_dir(a), "slim_inputs.pt")
    if os.path.exists(path) and (cached := torch.load(path))["key"] == key:
        return W, cached["h"]
    h = model_inputs(model, tok, pairs, a.tokens)
    write_atomic(path, lambda tmp: torch.save({"key": key, "h": h}, tmp))
    return W, h


def out_dir(a) -> str:
    """--out, else the EAGLE head's dir, else runs/slim/<model> (copy slim_own_r*.safetensors and the card to
    assets/heads/<model>/ to ship them)."""
    return a.out or (a.head if is_eagle_dir(a.head) else os.path.join("runs", "slim", head_dir(a.head).name))


def load_inputs(a):
    """(W [V, d], h [N, d]): the target's LM head and the EAGLE head's outputs on a.tokens cached inputs."""
    if not is_eagle_dir(a.head):
        return load_model_inputs(a)
    from core.decoding.eagle_io import load_head
    from core.train.data import load_cache, load_target
    with open(os.path.join(a.head, "config.json")) as f:
        target_id = json.load(f)["eagle"]["target"]
    model, _ = load_target(target_id)
    head = load_head(a.head, model)
    W = model.get_output_embeddings().weight.detach().float()
    ids, feats, _ = load_cache(a.cache)
    return W, head_inputs(head, ids, feats, a.tokens, a.seed)


def save_factors(path, up, down, K=None):
    """fp16 W_up and W_down; tied rows (K given) as fp32 K and fp16 W_down (core.pipeline.read_slim rebuilds W_up)."""
    from safetensors.torch import save_file
    first = {"K": K.float().contiguous()} if K is not None else {"W_up": up.half().contiguous()}
    t = {**first, "W_down": down.half().contiguous()}
    write_atomic(path, lambda tmp: save_file(t, tmp))


def card_line(a, name, W, r, n, before, after, secs):
    ce = f" + {a.ce_w} x CE(argmax of the full head)" if a.ce_w else ""
    form = "W_up = W K^T (tied rows), data-aware SVD init" if a.rows == "tied" else "SVD init"
    src = (f"EAGLE head inputs of {a.head} from {a.cache}'s cache" if is_eagle_dir(a.head) else
           f"final hidden states of {a.head} at the response positions of teacher-forced {a.data}")
    return (f"- {name}: SlimSpec W_up [{W.shape[0]}, {r}] @ W_down [{r}, {W.shape[1]}], {form} then {a.steps} Adam "
            f"steps (batch {a.batch}, lr {a.lr}, warmup + cosine to 10%) of forward KL(full || low-rank){ce} on {n} "
            f"{src} (seed {a.seed}); held-out KL {before[0]:.3f} -> "
            f"{after[0]:.3f}, top-1 agreement with the full head {before[1]:.1%} -> {after[1]:.1%}, "
            f"top-{RECALL_M} recall {before[2]:.1%} -> {after[2]:.1%} ({secs:.0f} s of training)")


def main(argv=None):
    a = parse_config(SlimConfig, sys.argv[1:] if argv is None else argv, "python -m core train-slim")
    check_rows(a.rows)  # before the inputs load (minutes for a model's hidden states)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = out_dir(a)
    os.makedirs(out, exist_ok=True)
    log = progress_log(os.path.join(out, "slim_progress.log"))
    W, h = load_inputs(a)
    r = a.rank or W.shape[1] // 8
    settings = {"head": a.head, "cache": a.cache if is_eagle_dir(a.head) else a.data, "rank": r, "tokens": a.tokens,
                "batch": a.batch, "lr": a.lr, "warmup": a.warmup, "ce_w": a.ce_w, "seed": a.seed, "rows": a.rows}
    log(f"slim start {json.dumps(settings)} steps={a.steps} inputs={len(h)}")
    up, down, before, after = train_factors(W, h, r, a.steps, a.batch, a.lr, a.seed, log, a.ce_w, a.warmup,
                                            os.path.join(out, "slim_ckpt.pt"), a.ckpt_every, a.eval_every,
                                            settings=settings, rows=a.rows)
    name = slim_file(r, own=not is_eagle_dir(a.head))
    ck = load_checkpoint(os.path.join(out, "slim_ckpt.pt"))
    save_factors(os.path.join(out, name), up, down, ck["up"] if a.rows == "tied" else None)  # ck["up"]: K, tied
    secs = ck["state"]["elapsed"]
    line = card_line(a, name, W, r, len(h), before, after, secs)
    with open(os.path.join(out, "training_card.md"), "a") as f:
        f.write(line + "\n")
    log(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
