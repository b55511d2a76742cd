"""Command line: python -m core generate|bench|freq|train-eagle|train-slim|bench-runtime|example."""
import argparse
import importlib
import json
import os
import sys
import time
from dataclasses import replace

from core.config import SpecConfig, METHODS, SHAPES, WINDOWS, BACKENDS, RUNTIMES, SLIM_INITS, CONTEXTS, DRAFT_WEIGHTS
from core.errors import SpecError

DTYPES = ("auto", "fp32", "bf16")
DRAFT_KEYS = ("shape", "depth", "top_k", "tree_size", "gamma", "w_max", "k_pre", "k_ver", "context", "rescore",
              "preview")  # per-model defaults: Alias.draft_defaults
SUBCOMMANDS = {  # name -> module whose main(argv) runs it
    "generate": "core.cli",
    "bench": "core.experiments.paper",  # --figures DIR: the paper experiments, else core.experiments.bench's table
    "freq": "core.freq",
    "train-eagle": "core.train.eagle",
    "train-slim": "core.train.slim",
    "bench-runtime": "core.experiments.runtime_bench",
    "device-check": "core.experiments.device_check",
    "export": "core.experiments.export",
    "maps": "core.maps.cli",  # check | compare: the token-map doctor
    "example": "core.example",
}


HELP = {"rescore": "SlimSpec / NanoSlim: score each row's top-M low-rank ids again with the full head's rows "
                   "(SVD-softmax; 0 = the paper's SlimSpec; default: the model's measured choice, else 0)",
        "preview": "NanoSpec: each row also scores its top-M ids of the draft's low-rank head (--slim-init factors) "
                   "over the whole vocabulary with the full head's rows, I_t ∪ U (default: the model's measured "
                   "choice, else 0 = the paper's NanoSpec)"}


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """Every engine option, shared by generate and bench."""
    d = SpecConfig()
    p.add_argument("--model", default=None, help="offline alias or Hugging Face id (default: smollm2-135m-instruct)")
    p.add_argument("--draft", default="auto",
                   help="auto | self | eagle | context (prompt lookup alone) | a draft model id sharing the tokenizer")
    p.add_argument("--draft-weights", default="auto", choices=DRAFT_WEIGHTS,
                   help="a separate draft model's layer weights on the fast runtime: auto (int4 for a bf16 draft model, "
                        "else its own) | model | int8 | int4; the target's verification keeps the output exact either way")
    p.add_argument("--runtime", default="auto", choices=RUNTIMES)
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="model weights: auto (bf16 on CUDA and on CPUs with AMX / avx512_bf16 under the fast runtime, else fp32) | fp32 | bf16")
    p.add_argument("--shape", default=None, choices=SHAPES,
                   help=f"default: the model's measured shape (core.models.Alias.draft_defaults), else {d.shape}")
    p.add_argument("--window", default=d.window, choices=WINDOWS)
    p.add_argument("--sources", default=d.sources, help="which chunks enter NanoSpec's stream S (comma list)")
    for name in ("w_max", "k_pre", "k_ver", "fr_size", "rank", "rescore", "preview", "depth", "top_k", "tree_size",
                 "gamma", "seed"):
        shaped = name in DRAFT_KEYS  # None: the model's measured shape, else the SpecConfig default
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None if shaped else getattr(d, name),
                       help=HELP.get(name))
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--temperature", type=float, default=d.temperature)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--backend", default=d.backend, choices=BACKENDS)
    p.add_argument("--slim-init", default=d.slim_init, choices=SLIM_INITS,
                   help="SlimSpec/NanoSlim factors: trained (shipped with the head, else SVD) or svd")
    p.add_argument("--context", default=None, choices=CONTEXTS,
                   help="merge continuations of the token history (prompt lookup) into the draft tree "
                        f"(default: the model's measured choice, else {d.context})")
    p.add_argument("--context-len", type=int, default=d.context_len, help="at most this many context nodes per step, on top of the model's tree")
    p.add_argument("--no-chat", action="store_true", help="do not apply the chat template")


def config_from(args, method: str) -> SpecConfig:
    """The engine options of `args`; draft-shape options not given come from the model's measured shape."""
    from core.models import draft_defaults
    keys = ("shape", "window", "sources", "w_max", "k_pre", "k_ver", "fr_size", "rank", "rescore", "preview", "depth", "top_k",
            "tree_size", "gamma", "seed", "max_new_tokens", "temperature", "top_p", "backend", "slim_init", "context", "context_len")
    opts = {k: getattr(args, k) for k in keys}
    shape = draft_defaults(getattr(args, "model", None))
    opts |= {k: shape.get(k, getattr(SpecConfig, k)) for k in DRAFT_KEYS if opts[k] is None}
    return SpecConfig(method=method, **opts).validate()


def pipeline_from(args):
    """The Pipeline the engine options in `args` name (model, draft, runtime, dtype)."""
    from core.models import DEFAULT_MODEL
    from core.pipeline import Pipeline
    return Pipeline.load(args.model or DEFAULT_MODEL, draft=args.draft, runtime=args.runtime,
                         dtype=torch_dtype(getattr(args, "dtype", "auto")),
                         draft_weights=getattr(args, "draft_weights", "auto"))


def torch_dtype(name: str):
    """--dtype name -> torch dtype (None = load_model's default)."""
    import torch
    return {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16}[name]


def run_once(pipe, prompt, cfg, chat=True) -> tuple:
    """(records, wall seconds) of one generation."""
    t0 = time.perf_counter()
    records = list(pipe.run(prompt, cfg, chat=chat))
    return records, time.perf_counter() - t0


def main(argv=None) -> int:
    from core.stats import compare_to_ar, summarize
    p = argparse.ArgumentParser(prog="python -m core generate", description="one speculative generation")
    p.add_argument("--prompt", required=True)
    p.add_argument("--method", default="nanospec", choices=METHODS)
    p.add_argument("--compare-ar", action="store_true", help="also run plain greedy decoding and compare")
    p.add_argument("--json", action="store_true")
    add_engine_args(p)
    args = p.parse_args(argv)
    cfg = config_from(args, args.method)
    if not args.prompt.strip():
        raise SpecError("the prompt is empty")
    pipe = pipeline_from(args)
    records, wall = run_once(pipe, args.prompt, cfg, not args.no_chat)
    out = summarize(records, wall)
    out.update(model=pipe.model_id, draft=pipe.draft_name, runtime=pipe.runtime_name, method=cfg.method,
               dtype=str(pipe.model.dtype).removeprefix("torch."))
    if args.compare_ar:
        ar, ar_wall = run_once(pipe, args.prompt, replace(cfg, method="ar"), not args.no_chat)
        cmp = compare_to_ar(records, ar)
        out.update(identical_to_ar=cmp["identical"], ar_tokens_per_s=summarize(ar, ar_wall)["tokens_per_s"],
                   first_diff=cmp["first_diff"], near_tie=cmp["tie"], verdict=cmp["verdict"])
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(out["text"])
        keys = ("new_tokens", "steps", "mean_accept_len", "mean_active_vocab", "coverage", "tokens_per_s",
                "identical_to_ar", "ar_tokens_per_s")
        print("\n" + "  ".join(f"{k}={_fmt(out[k])}" for k in keys if k in out), file=sys.stderr)
    return 0


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def dispatch(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in SUBCOMMANDS:
        print("usage: python -m core {" + "|".join(SUBCOMMANDS) + "} [options]  (--help on each)", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(SUBCOMMANDS[argv[0]])
        return module.main(argv[1:]) or 0
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # one line for the user; the traceback only on request
        if os.environ.get("SPECLENS_DEBUG"):
            raise
        print(f"error: internal error ({type(e).__name__}: {e}); rerun with SPECLENS_DEBUG=1 for details",
              file=sys.stderr)
        return 1
