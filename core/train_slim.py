"""python -m core train-slim --head DIR --rank r: SlimSpec low-rank factors of the draft LM head.

W [V, d] ~ W_up [V, r] @ W_down [r, d]: initialised by truncated SVD of W, then trained by forward
KL(softmax(W h) || softmax(W_up W_down h)) on head inputs h = the EAGLE head's outputs over the cached
training data. Written next to the head as slim_r{r}.safetensors (fp16, tensors W_up, W_down).
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

from core.eagle import load_head
from core.train_eagle import load_cache, load_target


def svd_init(W, r):
    # W = U S V^T  ->  W_up = U_r sqrt(S_r), W_down = sqrt(S_r) V_r^T
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    s = S[:r].sqrt()
    return (U[:, :r] * s).float(), (s[:, None] * Vh[:r]).float()


@torch.no_grad()
def head_inputs(head, ids, feats, n_tokens, seed):
    """h [N, d]: the EAGLE head's LM-head inputs on random cached sequences (teacher-forced features)."""
    order = list(range(len(ids)))
    random.Random(seed).shuffle(order)
    hs, n = [], 0
    for i in order:
        x, f = ids[i].long(), head.target_in(feats[i].float())
        L = len(x) - 1
        if L < 1:
            continue
        out, _ = head(f[None, :L], x[None, 1:], torch.arange(1, L + 1)[None])
        hs.append(head.head_in(out[0]))
        n += L
        if n >= n_tokens:
            break
    return torch.cat(hs)[:n_tokens]


def kl_stats(W, up, down, h):
    """forward KL(full || low-rank) per token and top-1 agreement."""
    logp = F.log_softmax(h @ W.T, -1)
    logq = F.log_softmax((h @ down.T) @ up.T, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean()
    return kl, (logp.argmax(-1) == logq.argmax(-1)).float().mean()


def train_factors(W, h, r, steps, batch, lr, seed, log=print):
    up0, down0 = svd_init(W, r)
    up, down = up0.clone().requires_grad_(), down0.clone().requires_grad_()
    opt = torch.optim.Adam([up, down], lr=lr)
    g = torch.Generator().manual_seed(seed)
    n_val = min(2048, len(h) // 5)
    val, tr = h[:n_val], h[n_val:]
    with torch.no_grad():
        before = [float(x) for x in kl_stats(W, up, down, val)]
    for step in range(steps):
        hb = tr[torch.randint(0, len(tr), (batch,), generator=g)]
        kl, _ = kl_stats(W, up, down, hb)
        opt.zero_grad()
        kl.backward()
        opt.step()
        if (step + 1) % 50 == 0:
            log(f"slim step {step + 1}/{steps} kl={kl.item():.4f}")
    with torch.no_grad():
        after = [float(x) for x in kl_stats(W, up, down, val)]
    return up.detach(), down.detach(), before, after


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m core train-slim")
    ap.add_argument("--head", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--cache", default="runs/eagle_smollm2", help="train-eagle --out dir holding cache/")
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(os.path.join(a.head, "config.json")) as f:
        target_id = json.load(f)["eagle"]["target"]
    model, _ = load_target(target_id)
    head = load_head(a.head, model)
    W = model.get_output_embeddings().weight.detach().float()
    r = a.rank or W.shape[1] // 8
    ids, feats = load_cache(a.cache)
    t0 = time.time()
    h = head_inputs(head, ids, feats, a.tokens, a.seed)
    up, down, before, after = train_factors(W, h, r, a.steps, a.batch, a.lr, a.seed)
    from safetensors.torch import save_file
    name = f"slim_r{r}.safetensors"
    save_file({"W_up": up.half().contiguous(), "W_down": down.half().contiguous()}, os.path.join(a.head, name))
    line = (f"- {name}: SlimSpec W_up [{W.shape[0]}, {r}] @ W_down [{r}, {W.shape[1]}], SVD init then {a.steps} Adam "
            f"steps (batch {a.batch}, lr {a.lr}) of forward KL(full || low-rank) on {len(h)} EAGLE head inputs; "
            f"held-out KL {before[0]:.3f} -> {after[0]:.3f}, top-1 agreement with the full head "
            f"{before[1]:.1%} -> {after[1]:.1%} ({time.time() - t0:.0f} s)")
    with open(os.path.join(a.head, "training_card.md"), "a") as f:
        f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
