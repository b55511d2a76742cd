"""The training card of an EAGLE head: its acceptance length tau measured by the engine (Pipeline.run, method full)
drafting with the new head on held-out prompts, chain and tree, written beside the head.
"""
import json
import os

from core.paths import write_atomic

CARD_SHAPES = {"chain": {"shape": "chain", "gamma": 4}, "tree": {"shape": "tree", "depth": 6, "top_k": 4, "tree_size": 24}}


CARD_MAX_NEW = 64


def eval_prompts(tcfg) -> tuple:
    """(the first tcfg.eval_prompts shipped prompts, round robin over categories; their source)."""
    from core.prompts import load_prompts
    ps = load_prompts()
    cats = sorted({p.category for p in ps})
    by = [[p.text for p in ps if p.category == c] for c in cats]
    out = [b[i] for i in range(max(len(b) for b in by)) for b in by if i < len(b)]
    return out[:tcfg.eval_prompts], "assets/prompts/speclens_prompts.jsonl"


def card_pipeline(model, tok, head, target_id):
    """A Pipeline drafting with `head` for the target `model` on the eager runner: the engine the card's tau
    comes from."""
    from core.decoding.eagle import EagleDrafter
    from core.pipeline import Pipeline
    from core.runtime.fast import make_runner
    target = make_runner(model, tok, "eager")
    return Pipeline(target_id, model, tok, target, EagleDrafter(head.eval(), target.head_weight), "eagle")


def engine_tau(pipe, prompts, shapes=None, max_new=CARD_MAX_NEW) -> dict:
    """Per draft shape: tau = the engine's mean accepted length (stats.summarize: tokens per verify step, bonus
    included) over every prompt's steps; greedy, method full, context drafting off (the head alone)."""
    from core.config import SpecConfig
    from core.trace.stats import summarize
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


def harvest_of(out) -> dict | None:
    """The settings of the harvest (core.train.harvest) that wrote DIR/cache, following a linked cache; else None."""
    path = os.path.join(os.path.dirname(os.path.realpath(os.path.join(out, "cache"))), "harvest.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f).get("settings")


def data_line(tcfg) -> str:
    """Where each cache dir's sequences came from: a harvest's greedy answers, else train-eagle's own cache."""
    from core.train.data import cache_dirs
    parts = []
    for d in cache_dirs(tcfg):
        h = harvest_of(d)
        if h:
            parts.append(f"the target's greedy answers (<= {h['max_new']} new tokens) to "
                         + ("questions it sampled itself (Magpie)" if h.get("source") == "magpie" else f"prompts of {h['data']}")
                         + " (core.train.harvest)")
        elif tcfg.self_distill:
            parts.append(f"{tcfg.data} (self-distilled: the target's greedy generations, max {tcfg.max_new} new tokens, "
                         f"of {tcfg.self_distill} prompts)")
        else:
            parts.append(f"{tcfg.data} (teacher forcing on responses)")
    return "; ".join(parts)


def write_card(tcfg, card, acc, path=None):
    """DIR/training_card.md: data, loss, schedule, held-out agreement, and the engine's tau per shape (`acc`)."""
    path = path or os.path.join(tcfg.out, "training_card.md")
    lines = [f"# EAGLE head for {tcfg.target}", "",
             "One LlamaDecoderLayer (init: the target's last layer) + fc [2d -> d] over [pre-norm last-layer feature; "
             "next-token embedding]; output -> the target's frozen final norm -> the target's LM head W.", "",
             f"- data: {data_line(tcfg)}",
             f"- cached tokens: {card['tokens']} in {card['seqs']} sequences (prompt + response)",
             f"- steps: {card['steps']}, batch {tcfg.batch} x seq {tcfg.seq_len}, lr {tcfg.lr}, seed {tcfg.seed}, "
             f"training-time-test depth {tcfg.depth}",
             f"- loss: {tcfg.feat_w} * SmoothL1(f^/sigma, f/sigma) (sigma = {card['sigma']:.2f}, global) + {tcfg.tok_w} * "
             f"CE(p_target || q) over the {card['subset']} most frequent ids of the cache + {tcfg.negatives} random other "
             f"ids redrawn each step; depth s weighted 0.8^(s-1); bf16 autocast={tcfg.amp}",
             f"- loss weight of prompt/chat-template targets: {tcfg.prompt_w} (response targets 1); init: "
             f"{tcfg.init or 'the target last layer'}",
             f"- wall clock: {card.get('minutes', 0):.0f} min of training on "
             + (f"{tcfg.threads} CPU thread(s) (shared machine)" if tcfg.device == "cpu" else tcfg.device),
             "- final running losses: " + ", ".join(f"{k}={v:.3f}" for k, v in sorted(card["final"].items()))
             + "  (f = feature loss, t = token loss, a = top-1 agreement with the target, per depth)",
             f"- held-out response agreement (full vocabulary, {tcfg.holdout} self-distilled eval-split prompts"
             + (f"; m: the answers cached in {tcfg.held_cache}" if tcfg.held_cache else "") +
             ", teacher-forced, per depth): " + ", ".join(f"{k}: {card.get('held0', {}).get(k, float('nan')):.3f} -> {v:.3f}"
                                                       for k, v in card.get("held", {}).items()), "",
             f"## Acceptance (the engine: Pipeline.run, method full, greedy, context drafting off, full-vocabulary "
             f"head W, fp32 target on the eager runner; {card.get('eval_n', 0)} prompts of {card.get('eval_src', '')} x "
             f"{CARD_MAX_NEW} new tokens)", "",
             "tau = the engine's mean accepted length (core.trace.stats.summarize: tokens per verify step, bonus included).", "",
             "| shape | verify steps | tau |", "|---|---|---|"]
    for r in acc.values():
        lines.append(tau_row(r))
    write_atomic(path, "\n".join(lines) + "\n")
