"""device-check's train step: an EAGLE head trained at scale within a time budget, with the existing trainers.

    self-distilled data  core.train.data.build_cache (batched greedy generation, features from the same passes)
    the head             core.train.eagle.train (on ck.device; from the shipped head when there is one)
    SlimSpec factors     core.train.slim.train_factors on the new head's LM-head inputs
    tau                  the engine (Pipeline.run) on the shipped prompts: new head vs shipped head, default tree + chain
The budget splits: data 40 %, head 35 %, factors 10 %, tau the rest. Everything lands in DIR/train (head,
config.json, training_card.md, slim_r{r}.safetensors: fp16, assets/heads/-ready) plus DIR/tau.csv, DIR/train.json;
the feature cache and checkpoints stay in the work dir (gigabytes at scale).
"""
import argparse
import copy
import gzip
import json
import re
import shutil
import threading
import time
from pathlib import Path

import torch

from core.paths import ASSETS
from core.pipeline import head_dir, slim_file

TAU_COLS = ["head", "method", "shape", "prompt_id", "steps", "tokens", "tau"]
DISTILL = Path("runs/chunks/distill_prompts.jsonl.gz")


def read_prompts(path) -> list:
    """[(prompt, "")] from JSONL or JSONL.gz rows with a prompt (or question) field."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r.get("prompt") or r.get("question"), "") for r in rows if r.get("prompt") or r.get("question")]


def distill_pairs(ck) -> tuple:
    """(pairs, source): --data, else the carried distill prompts, else the shipped prompts' texts."""
    if ck.data:
        return read_prompts(ck.data), ck.data
    if DISTILL.is_file() and not ck.tiny:
        return read_prompts(DISTILL), str(DISTILL)
    return [(p.text, "") for p in ck.prompts(12 if ck.tiny else None)], "assets/prompts/speclens_prompts.jsonl"


def train_config(ck, n_prompts: int, budget: float, init: str):
    from core.train.eagle import TrainConfig
    common = dict(target=ck.model_id, out=str(ck.work / "train"), device=ck.device, self_distill=n_prompts,
                  gen_minutes=0.4 * budget / 60, minutes=0.35 * budget / 60, eval_prompts=0, holdout=0,
                  ckpt_min=1e9, init=init, prompt_w=0.1, data="device-check prompts")
    if ck.tiny:
        return TrainConfig(**common, max_new=12, gen_batch=8, shard_size=8, steps=8, batch=2, seq_len=48, depth=2,
                           vocab_subset=0, negatives=0, cache_dtype="float32", amp=False)
    return TrainConfig(**common, max_new=192, gen_batch=512, shard_size=1024, steps=100000, batch=32, seq_len=512,
                       depth=3, cache_dtype="bfloat16")


def shipped_head(ck) -> Path | None:
    d = head_dir(ck.model_id)
    return d if not ck.tiny and (d / "eagle.safetensors").is_file() else None


def train_head(ck, budget: float) -> tuple:
    """(tcfg, fp32 target model, tokenizer, {tokens, seqs, source}) after data generation and training."""
    from core.train.eagle import train
    from core.train.data import build_cache, load_cache, load_target
    pairs, source = distill_pairs(ck)
    init = shipped_head(ck)
    tcfg = train_config(ck, len(pairs), budget, str(init) if init else "")
    torch.manual_seed(tcfg.seed)
    model, tok = load_target(tcfg.target, tcfg.device)
    model.requires_grad_(False)
    Path(tcfg.out).mkdir(parents=True, exist_ok=True)
    build_cache(model.to(getattr(torch, tcfg.cache_dtype)), tok, tcfg, pairs)
    model, tok = load_target(tcfg.target, tcfg.device)  # the fp32 target again (a bf16 round trip rounds W)
    model.requires_grad_(False)
    train(model, tok, tcfg)
    ids, _, _ = load_cache(tcfg.out)
    return tcfg, model, tok, {"tokens": sum(len(i) for i in ids), "seqs": len(ids), "source": source,
                              "init": tcfg.init or "the target's last layer"}


def train_slim(ck, tcfg, model, budget: float) -> dict:
    """SlimSpec factors for the new head (rank d/8) from its LM-head inputs on the cached data."""
    from core.decoding.eagle_io import load_head
    from core.train import slim as ts
    from core.train.data import load_cache
    head = load_head(tcfg.out, model).to(model.device)
    ids, feats, _ = load_cache(tcfg.out)
    W = model.get_output_embeddings().weight.detach().float()
    n_tokens, steps, batch = (2000, 20, 64) if ck.tiny else (200000, 4000, 1024)
    h = ts.head_inputs(head, ids, feats, n_tokens, 0)
    r = W.shape[1] // 8
    t0, logged, init = time.time(), [], shipped_factors(ck, r)
    up, down, before, after = ts.train_factors(W, h, r, steps, batch, 3e-3, 0, log=logged.append,
                                               eval_every=max(steps // 4, 1), log_every=1,
                                               max_seconds=0.1 * budget, init=init)
    steps = int(re.findall(r"slim step (\d+)/", logged[-1])[0])  # fewer than planned when the time ran out
    name = slim_file(r, own=False)
    ts.save_factors(str(Path(tcfg.out) / name), up, down)
    a = argparse.Namespace(ce_w=0.0, steps=steps, batch=batch, lr=3e-3, head=tcfg.out, cache=tcfg.out, seed=0,
                           rows="free")
    line = ts.card_line(a, name, W, r, len(h), before, after, time.time() - t0)
    with open(Path(tcfg.out) / "training_card.md", "a") as f:
        f.write((line.replace("SVD init", "init: the shipped factors") if init else line) + "\n")
    return {"rank": r, "inputs": len(h), "held_kl": [before[0], after[0]], "held_top1": [before[1], after[1]],
            "up": up, "down": down}


def shipped_factors(ck, r: int):
    """(W_up, W_down) shipped with the head the new one starts from, else None (SVD init)."""
    from safetensors.torch import load_file
    path = shipped_head(ck) and shipped_head(ck) / slim_file(r, own=False)
    if not path or not path.is_file():
        return None
    sd = load_file(str(path))
    return (sd["W_up"], sd["W_down"]) if "W_up" in sd else None  # tied rows (K) do not start free ones


def with_head(pipe, path: Path, slim=None):
    """A copy of `pipe` drafting with the EAGLE head at `path` (and its trained SlimSpec factors)."""
    from core.decoding.eagle_io import load_eagle_drafter
    p = copy.copy(pipe)
    p.drafter = load_eagle_drafter(pipe.target, path, "eager")
    p.draft_name, p._slim, p.lock = "eagle", {}, threading.Lock()
    if slim is not None:
        W = p.drafter.head_weight
        p._slim[(slim["rank"], "trained")] = (slim["up"].to(W.device, W.dtype), slim["down"].to(W.device, W.dtype))
    return p


def measure_tau(ck, heads: dict, deadline: float) -> dict:
    """tau = tokens per verify step (bonus included) per (head, method, shape), prompt by prompt until the deadline."""
    from core.config import SpecConfig
    from core.paths import append_csv
    from core.trace.stats import new_tokens_after_prefill
    shapes = [("full", "tree"), ("full", "chain"), ("slimspec", "tree")]
    tot = {}
    for p in ck.prompts(4 if ck.tiny else None):
        for name, (pipe, slim_rank) in heads.items():
            for method, shape in shapes:
                cfg = SpecConfig(method=method, shape=shape, max_new_tokens=ck.max_new, rank=slim_rank).validate()
                recs = list(pipe.run(p.text, cfg))
                steps = sum(r.kind != "prefill" for r in recs)
                toks = new_tokens_after_prefill(recs)
                append_csv(ck.out / "tau.csv", TAU_COLS, {"head": name, "method": method, "shape": shape,
                           "prompt_id": p.id, "steps": steps, "tokens": toks, "tau": round(toks / max(steps, 1), 3)})
                s, t = tot.get((name, method, shape), (0, 0))
                tot[(name, method, shape)] = (s + steps, t + toks)
        if time.monotonic() > deadline:
            break
    return {f"{h}/{m}/{s}": round(t / max(n, 1), 3) for (h, m, s), (n, t) in tot.items()}


def publish_head(work, out: Path) -> Path:
    """The assets/heads/-ready files of a trained head: work dir -> out."""
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(work).iterdir():
        if f.name in ("eagle.safetensors", "config.json", "training_card.md", "progress.log") or \
                f.name.startswith("slim_r") and f.suffix == ".safetensors":
            shutil.copy(f, out / f.name)
    return out


def train_step(ck, load_pipe, write_json) -> str:
    """device-check's train step; load_pipe(ck, model, draft) and write_json(ck, name, data) come from
    tools.device_check (passed in: this module sits below it)."""
    budget = ck.left()
    tcfg, model, tok, data = train_head(ck, budget)
    slim = train_slim(ck, tcfg, model, budget)
    del model
    steps = torch.load(Path(tcfg.out) / "ckpt.pt", weights_only=False)["step"]
    head = publish_head(tcfg.out, ck.out / "head")  # before τ: a failure there keeps the trained head
    res = {**data, "steps": steps, "tau": {}, "slim": {k: v for k, v in slim.items() if k not in ("up", "down")},
           "head_dir": str(head), "assets": str(ASSETS / "heads")}
    write_json(ck, "train.json", res)
    pipe = load_pipe(ck, ck.model_id, "self")
    heads = {"new": (with_head(pipe, Path(tcfg.out), slim), slim["rank"])}
    if shipped_head(ck):
        heads["shipped"] = (with_head(pipe, shipped_head(ck)), 0)
    tau = measure_tau(ck, heads, time.monotonic() + max(ck.left() - 10, 0))
    new, old = tau.get("new/full/tree"), tau.get("shipped/full/tree")
    res |= {"tau": tau, "beats_shipped": old is not None and new is not None and new > old,
            "reaches_1_8": bool(new and new >= 1.8)}
    write_json(ck, "train.json", res)
    return f"{data['tokens']} tokens, tau new {new} vs shipped {old} (default tree)"
