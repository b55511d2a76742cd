"""A small, deterministic synthetic trace with the StepRecord dict schema (tests and a fallback example)."""
import math
import random

WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".", " It",
         " was", " a", " sunny", " day", ",", " and", " birds", " sang", "\n", " in", " trees",
         " of", " green", " light", " Speculative", " decoding", " drafts", " tokens", " fast")


def synthetic_trace(n_steps: int = 12, seed: int = 0, method: str = "nanospec", w_max: int = 40,
                    raw_stream: bool = False) -> dict:
    """raw_stream: also record the raw chunks appended to S (stream["appended"])."""
    rng = random.Random(seed)
    vocab = {str(i): w for i, w in enumerate(WORDS)}
    window = []
    records = [_prefill_record(rng, [0, 1, 2, 3, 4], window, w_max, raw_stream)]
    for step in range(1, n_steps + 1):
        records.append(_step_record(rng, step, window, w_max, raw_stream))
    records[-1]["finished"] = True
    cfg = {"method": method, "w_max": w_max, "k_pre": 2, "k_ver": 2, "fr_size": 12, "depth": 3,
           "top_k": 2, "tree_size": 6, "max_new_tokens": 64, "temperature": 0.0}
    meta = {"version": 1, "prompt": "Tell me about the quick brown fox.", "model": "synthetic",
            "draft": "synthetic", "method": method, "cfg": cfg, "vocab": vocab,
            "vocab_size": len(WORDS), "synthetic": True}
    for r in records:
        r["text"] = "".join(vocab[str(t)] for t in r["emitted"])
    return {"meta": meta, "records": records}


def _prefill_record(rng, prompt_ids, window, w_max, raw) -> dict:
    chunks = [["prompt", list(prompt_ids)], ["prefill", [rng.randrange(len(WORDS)) for _ in range(2 * len(prompt_ids))]]]
    first = rng.randrange(len(WORDS))
    return _record(0, "prefill", emitted=[first], in_vocab=[True], fr=[rng.randrange(20)], p=[None],
                   stream=_stream_event(window, chunks, w_max, raw),
                   timing={"draft_backbone": 0.0, "lm_head": 0.0, "gather": 0.0, "verify": 9.0, "other": 1.0})


def _stream_event(window: list, chunks: list, w_max: int, raw: bool) -> dict:
    """What core.decoding.stream reports: ids entering / leaving I_t = Unique(Suffix(S, W_max))."""
    before = set(window[-w_max:])
    for _, ids in chunks:
        window.extend(ids)
    after = set(window[-w_max:])
    entered, seen = [], set()
    for src, ids in chunks:
        for t in ids:
            if t in after and t not in before and t not in seen:
                seen.add(t)
                entered.append([t, src])
    ev = {"entered": entered, "left": sorted(before - after), "size_s": len(window), "active": len(after)}
    if raw:
        ev["appended"] = [[src, list(ids)] for src, ids in chunks]
    return ev


def _step_record(rng, step, window, w_max, raw) -> dict:
    tree = _random_tree(rng, depth=3, top_k=2)
    path = _accepted_path(rng, tree)
    bonus = rng.randrange(len(WORDS))
    emitted = [tree["tokens"][i] for i in path] + [bonus]
    chunks = [["draft", list(dict.fromkeys(tree["tokens"]))],
              ["verify", [rng.randrange(len(WORDS)) for _ in range(2 * (len(path) + 1))]]]
    stream = _stream_event(window, chunks, w_max, raw)
    in_vocab = [True] * len(path) + [bonus in set(window[-w_max:])]
    fr = [rng.randrange(30) for _ in emitted]
    p = [math.exp(tree["logp"][i]) for i in path] + [None]
    timing = {"draft_backbone": rng.uniform(3, 6), "lm_head": rng.uniform(1, 4),
              "gather": rng.uniform(0.1, 0.5), "verify": rng.uniform(8, 12), "other": rng.uniform(0.2, 1)}
    rec = _record(step, "step", emitted, in_vocab, fr, p, stream, timing)
    rec["tree"], rec["accepted"] = tree, path
    return rec


def _random_tree(rng, depth: int, top_k: int) -> dict:
    tokens, parents, logp = [], [], []
    frontier = [-1]
    for _ in range(depth):
        nxt = []
        for par in frontier[:2]:
            for _ in range(top_k):
                tokens.append(rng.randrange(len(WORDS)))
                parents.append(par)
                logp.append(math.log(rng.uniform(0.05, 0.95)))
                nxt.append(len(tokens) - 1)
        frontier = nxt
    in_vocab = [rng.random() > 0.15 for _ in tokens]
    return {"tokens": tokens, "parents": parents, "logp": logp, "in_vocab": in_vocab, "head_calls": depth}


def _accepted_path(rng, tree) -> list:
    path, cur = [], -1
    while rng.random() < 0.7:
        kids = [i for i, par in enumerate(tree["parents"]) if par == cur]
        if not kids:
            break
        cur = kids[0]
        path.append(cur)
    return path


def _record(step, kind, emitted, in_vocab, fr, p, stream, timing) -> dict:
    return {"step": step, "kind": kind,
            "tree": {"tokens": [], "parents": [], "logp": [], "in_vocab": []},
            "accepted": [], "emitted": emitted, "emitted_in_vocab": in_vocab, "emitted_fr_rank": fr,
            "emitted_draft_p": p, "stream": stream, "timing_ms": timing, "text": "",
            "finished": False, "cut": ""}
