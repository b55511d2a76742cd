"""llama.cpp beside our decoding: the `llamacpp` / `llamacpp-specN` variants of the pair suite, and
python -m bench llamacpp bench: our AR and llama.cpp's plain (and speculative, with --draft) decoding of
the same GGUF, interleaved per prompt in one process, same threads, prompts (our chat template), new tokens, greedy.

Two speeds per row: `tps` counts the whole generation (prompt eval included: our wall, llama.cpp's prompt eval +
eval), `decode_tps` the generation phase only (tokens after the first over their time). Beside each plain decoding,
the memory bound: bytes one token step reads (ours: bandwidth.step_bytes; llama.cpp: every GGUF tensor but the
token embeddings, which it gathers, unless they are also the head) over the read bandwidth measured at the end.
`--record` appends the plain decoding's figures to results/results.jsonl; `--fast` / `--q8`: the A/B switches.
"""
import argparse
import functools
import re
import sys

import torch

from bench.bandwidth import decode_tps
from bench.llamacpp import build as llamacpp_build, run as llamacpp_run
from bench.options import add_switches, apply_q8, with_target
from core.errors import SpecError
from core.models import draft_defaults, source_gguf
from core.trace.stats import aggregate

PEER = re.compile(r"llamacpp(?:-spec(?P<draft_max>\d+)?)?")


def peer_variant(name: str) -> int | None:
    """llamacpp -> 0 (plain), llamacpp-spec -> the target's draft depth, llamacpp-specN -> N; else None."""
    m = PEER.fullmatch(name)
    if m is None:
        return None
    return int(m["draft_max"]) if m["draft_max"] else (0 if name == "llamacpp" else -1)


def usable(names: list) -> list:
    """names without the llama.cpp variants (and a message saying why) where llama.cpp is not built."""
    peers = [v for v in names if peer_variant(v) is not None]
    if peers and not llamacpp_build.built():
        print(f"skipping {', '.join(peers)}: {llamacpp_build.not_built()}", file=sys.stderr)
        return [v for v in names if v not in peers]
    return names


def gguf_of(model_id: str):
    path = source_gguf(model_id)
    if path is None:
        raise SpecError(f"{model_id}: no GGUF in the cache for llama.cpp to read (an offline alias loads one)")
    return path


def draft_max_of(pipe, draft_max: int) -> int:
    """-1 -> the target's measured draft depth (its tree depth or chain length), 4 without one."""
    if draft_max >= 0:
        return draft_max
    d = draft_defaults(pipe.model_id)
    return d.get("depth") or d.get("gamma") or 4


def templated(pipe, text: str) -> tuple[str, list]:
    """(our chat-templated prompt text, its ids): the text llama.cpp gets and the ids its tokenization must equal.
    Where the GGUF tells llama.cpp to add BOS itself (gemma), the text leaves our leading BOS out."""
    ids = pipe.prompt_ids(text)
    skip = 1 if ids and ids[0] == pipe.tokenizer.bos_token_id and adds_bos(gguf_of(pipe.model_id)) else 0
    return pipe.tokenizer.decode(ids[skip:], skip_special_tokens=False), ids


@functools.cache
def adds_bos(path) -> bool:
    """Whether llama.cpp prepends BOS to a prompt of this GGUF (its tokenizer.ggml.add_bos_token); read once per file,
    not at every prompt and variant."""
    from gguf import GGUFReader
    field = GGUFReader(str(path)).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field is not None and field.contents())


def our_decode(records) -> tuple[int, float]:
    """(tokens after the prefill's, their seconds) of one of our runs: its generation phase."""
    rest = [r for r in records if r.kind != "prefill"]
    return sum(len(r.emitted) for r in rest), sum(sum(r.timing_ms.values()) for r in rest) / 1e3


def peer_row(pipe, prompt, name: str, n: int, ar_records, threads: int | None = None) -> dict:
    """One llama.cpp run of `prompt` as a bench row, compared to our AR's text (`ar_records`, None: no verdict)."""
    from core.trace.stats import tokens_of
    threads = threads or torch.get_num_threads()
    text, ids = templated(pipe, prompt.text)
    dmax = peer_variant(name)
    if dmax == 0:
        run = llamacpp_run.complete(gguf_of(pipe.model_id), text, n, threads)
    else:
        run = llamacpp_run.speculate(gguf_of(pipe.model_id), gguf_of(pipe.draft_name), text, n, threads,
                                     draft_max_of(pipe, dmax))
    row = {"variant": name, "new_tokens": run.new_tokens, "wall_s": run.prompt_s + run.decode_s,
           "decode_tokens": run.decode_tokens, "decode_s": run.decode_s, "identical": None, "agree": None,
           "prompt_ids_equal": run.prompt_ids == ids if run.prompt_ids else None,
           "drafted": run.drafted, "accepted": run.accepted, "repacked": run.repacked, "text": run.text}
    if ar_records is not None:
        ours = tokens_of(ar_records)
        want = pipe.tokenizer.decode(ours, skip_special_tokens=True)
        same = run.text == want  # then every token agrees (llama.cpp's text leaves out a final EOS)
        agree = len(ours) if same else llamacpp_run.agreement(pipe.tokenizer, ours, run.text)
        margins = [m for r in ar_records for m in r.margin]
        row |= {"identical": same, "agree": agree,
                "split_margin": round(margins[agree], 3) if agree < min(len(ours), len(margins)) else None}
    return row


def gguf_step_bytes(path) -> int:
    """Bytes one llama.cpp token step reads from a GGUF: every tensor but token_embd, unless it is the head too."""
    from gguf import GGUFReader
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    return sum(sizes.values()) - (sizes.get("token_embd.weight", 0) if "output.weight" in sizes else 0)


def peer_bound(rows: list, gguf, gbs: float) -> dict:
    """llama.cpp's plain decoding beside its floor: GGUF bytes per token / bandwidth, and the fraction it reaches."""
    plain = [r for r in rows if r["variant"] == "llamacpp"]
    floor_ms = (nbytes := gguf_step_bytes(gguf)) / gbs / 1e6
    ms = 1000 / decode_tps(plain) if plain else 0.0
    return {"llamacpp_gb": round(nbytes / 1e9, 3), "llamacpp_floor_ms": round(floor_ms, 2),
            "llamacpp_decode_ms": round(ms, 2), "llamacpp_of_floor": round(floor_ms / ms, 2) if ms else ""}


def table(rows: list, names: list) -> list:
    """One row per variant: tok/s (whole run and generation phase), both over our AR's, agreement with our AR."""
    base = [r for r in rows if r["variant"] == "ar"]
    ar_tps, ar_dec = aggregate(base)["tokens_per_s"], decode_tps(base)
    out = []
    for v in names:
        g = [r for r in rows if r["variant"] == v]
        tps, dec = aggregate(g)["tokens_per_s"], decode_tps(g)
        judged = [r for r in g if r.get("identical") is not None]
        out.append({"variant": v, "prompts": len(g), "tokens": sum(r["new_tokens"] for r in g),
                    "tps": round(tps, 2), "decode_tps": round(dec, 2), "x_ar": round(tps / ar_tps, 3),
                    "x_ar_decode": round(dec / ar_dec, 3),
                    "identical": f"{sum(r['identical'] for r in judged)}/{len(judged)}" if judged else "",
                    "agree_tokens": sum(r["agree"] for r in judged) if judged else "",
                    "prompt_ids_equal": sum(bool(r.get("prompt_ids_equal")) for r in g) if v != "ar" else "",
                    "no_repack": sum(r.get("repacked") is False for r in g) if v != "ar" else "",
                    "max_split_margin": max((r["split_margin"] for r in g if r.get("split_margin") is not None),
                                            default="")})
    return out


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench llamacpp bench",
                                description="our AR beside llama.cpp on the same GGUF")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--draft", default=None, help="a draft alias: adds llamacpp-spec (its GGUF drafts for llama.cpp)")
    p.add_argument("--variants", default=None, help="comma list of llamacpp, llamacpp-spec, llamacpp-specN")
    p.add_argument("--prompts", default="assets/prompts/heldout.jsonl")
    p.add_argument("--limit", type=int, default=1, help="prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tg", type=int, default=3, help="llama-bench tg repetitions per GGUF (0: skip)")
    p.add_argument("--out", default=None, help="JSON file for the rows")
    p.add_argument("--record", action="store_true", help="append the plain decoding's figures to results/results.jsonl")
    add_switches(p)
    return p.parse_args(argv)


def prompt_depth(pipe, prompts) -> int:
    """The prompts' mean length in tokens (chat template applied): the context our decoding starts from, which
    llama-bench's tg then runs after (-d), so that both generate at the same depth of attention."""
    return round(sum(len(pipe.prompt_ids(p.text)) for p in prompts) / len(prompts))


def ar_row(pipe, prompt, n: int) -> tuple[dict, list]:
    from core.config import SpecConfig
    from core.paper.runs import run_row
    from core.trace.stats import tokens_of
    row, _, records = run_row(pipe, prompt, SpecConfig(method="ar", max_new_tokens=n).validate())
    toks, secs = our_decode(records)
    text = pipe.tokenizer.decode(tokens_of(records), skip_special_tokens=True)
    return {**row, "variant": "ar", "trace": None, "decode_tokens": toks, "decode_s": secs, "text": text}, records


def run_prompts(pipe, prompts, names, n: int) -> list:
    """Every prompt through our AR then each llama.cpp variant, interleaved (first-call costs run beforehand)."""
    ar_row(pipe, prompts[0], 4)
    for v in names:
        peer_row(pipe, prompts[0], v, 4, None)
    rows = []
    for p in prompts:
        row, records = ar_row(pipe, p, n)
        rows.append({**row, "prompt_id": p.id})
        for v in names:
            rows.append({**peer_row(pipe, p, v, n, records), "prompt_id": p.id, "category": p.category})
        for r in rows[-1 - len(names):]:
            print({k: r.get(k) for k in ("prompt_id", "variant", "new_tokens", "wall_s", "decode_s", "identical",
                                         "agree", "split_margin", "prompt_ids_equal")}, file=sys.stderr, flush=True)
    return rows


def bench_main(argv=None) -> int:
    import argparse as ap
    import json

    from core.paper.runs import select_prompts
    from bench.bandwidth import memory_bound, read_gbs
    from core.pipeline import Pipeline

    args = parse(argv)
    if not llamacpp_build.built():
        raise SpecError(llamacpp_build.not_built())
    names = (args.variants or ("llamacpp,llamacpp-spec" if args.draft else "llamacpp")).split(",")
    if bad := [v for v in names if peer_variant(v) is None]:
        raise SpecError(f"unknown llama.cpp variant(s) {', '.join(bad)}")
    torch.set_num_threads(args.threads)
    apply_q8(args)
    pipe = with_target(Pipeline.load(args.model, draft=args.draft or "auto"), args)
    prompts = select_prompts(ap.Namespace(prompts=[args.prompts], categories=None, limit=args.limit))
    rows = run_prompts(pipe, prompts, names, args.max_new_tokens)
    gbs = read_gbs()
    from core.kernels.cpu import isa
    result = {"cpu_isa_cap": isa.cap(), "llamacpp_build": llamacpp_build.peer_flavor(),
              "table": table(rows, ["ar", *names]), "ours_bound": memory_bound(rows, pipe.model, gbs, pipe.target),
              "llamacpp_bound": peer_bound(rows, gguf_of(pipe.model_id), gbs)}
    if args.tg:
        ggufs, depth = [args.model] + ([args.draft] if args.draft else []), prompt_depth(pipe, prompts)
        result["llama_bench"] = {m: round(llamacpp_run.bench_tg(gguf_of(m), args.max_new_tokens, args.threads,
                                                                args.tg), 2) for m in ggufs}
        result["llama_bench_at_prompt"] = tg_at_depth(ggufs, args, depth)
    print(f"cpu_isa_cap={result['cpu_isa_cap']}  llamacpp_build={result['llamacpp_build']}")
    for r in result["table"]:
        print("  ".join(f"{k}={v}" for k, v in r.items()))
    for k in ("ours_bound", "llamacpp_bound", "llama_bench", "llama_bench_at_prompt"):
        if k in result:
            print(f"{k}: " + "  ".join(f"{a}={b}" for a, b in result[k].items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**result, "rows": rows, "settings": vars(args)}, f, indent=1)
    if args.record:
        record(result, args, argv)
    return 0


def record(result: dict, args, argv) -> None:
    """Our plain decoding beside llama.cpp's as a results row: decode tok/s, llama.cpp's at the prompts' depth
    (llama-bench) where measured, else its per-prompt decoding; the whole runs' ratio beside."""
    from bench.results import append_row
    by = {r["variant"]: r for r in result["table"]}
    depth = next(iter(result.get("llama_bench_at_prompt", {}).values()), None)
    figures = {"ours_tok_s": by["ar"]["decode_tps"], "llamacpp_tok_s": depth or by["llamacpp"]["decode_tps"],
               "llamacpp_at": "the prompts' depth (llama-bench)" if depth else "per prompt",
               "whole_runs_x": round(by["ar"]["tps"] / by["llamacpp"]["tps"], 2)} if "llamacpp" in by else {}
    if not figures:
        print("nothing recorded: no plain llama.cpp variant in this run", file=sys.stderr)
        return
    row = append_row("plain", args.model, figures, "python -m bench llamacpp bench", argv=argv, threads=args.threads,
                     draft=args.draft)
    print(f"recorded in results/results.jsonl: {row['figures']}", file=sys.stderr)


def tg_at_depth(models: list, args, depth: int) -> dict:
    """{model@dDEPTH: llama-bench tok/s after depth tokens of context (filled a token a batch, see `bench_args`)}; a
    model whose run crashes is left out, said on stderr."""
    out = {}
    for m in models:
        try:
            out[f"{m}@d{depth}"] = round(llamacpp_run.bench_tg(gguf_of(m), args.max_new_tokens, args.threads, args.tg,
                                                               depth), 2)
        except llamacpp_run.Crashed as err:
            print(f"llama-bench after {depth} tokens of context on {m}: {err}", file=sys.stderr)
    return out


def tg_main(argv=None) -> int:
    """llama-bench's tg figure (generation only, no prompt) of each model's GGUF, same threads."""
    p = argparse.ArgumentParser(prog="python -m bench llamacpp tg")
    p.add_argument("--models", default="smollm2-135m-instruct", help="comma list of aliases")
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--depth", type=int, default=0, help="tokens of context before the generation (llama-bench -d)")
    args = p.parse_args(argv)
    for m in args.models.split(","):
        tps = llamacpp_run.bench_tg(gguf_of(m), args.n, args.threads, args.reps, args.depth)
        at = f" after {args.depth} tokens" if args.depth else ""
        print(f"{m}: llama-bench tg{args.n}{at} {tps:.2f} tok/s ({args.threads} threads, {args.reps} reps)")
    return 0
