"""The engine's command-line options, shared by generate, bench and the other experiments: the parser's arguments
(`add_engine_args`), the SpecConfig they give (`config_from`) and the Pipeline they name (`pipeline_from`)."""
import argparse

from core.config import BACKENDS, CONTEXTS, DRAFT_WEIGHTS, RUNTIMES, SHAPES, SLIM_INITS, WINDOWS, SpecConfig

DTYPES = ("auto", "fp32", "bf16")
DRAFT_KEYS = ("shape", "depth", "top_k", "tree_size", "gamma", "w_max", "k_pre", "k_ver", "context", "rescore",
              "preview")  # per-model defaults: Alias.draft_defaults
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
                   help="the draft's layer weights on the fast runtime: auto (an EAGLE head's: int8 blocks where q8_mm "
                        "runs; a bf16 draft model's: int4; else its own) | model | int8 | int4; the target's "
                        "verification keeps the output exact either way")
    p.add_argument("--runtime", default="auto", choices=RUNTIMES)
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="model weights: auto (bf16 on CUDA and on CPUs with AMX / avx512_bf16 under the fast runtime, else fp32) | fp32 | bf16")
    p.add_argument("--shape", default=None, choices=SHAPES,
                   help="tree | chain | context (no model draft: prompt lookup alone) | auto (the cost model's best on "
                        "this machine's calibration, context alone included; python -m core calibrate). Default: auto "
                        "where the command offers it and no --depth/--top-k/--tree-size/--gamma is given, else the "
                        f"model's measured shape (core.models.Alias.draft_defaults), else {d.shape}")
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


def config_from(args, method: str, auto: bool = False) -> SpecConfig:
    """The engine options of `args`; draft-shape options not given come from the model's measured shape, or with
    `auto` (the commands a user runs: generate, bench) the shape is "auto" unless one of them was given."""
    from core.models import draft_defaults
    keys = ("shape", "window", "sources", "w_max", "k_pre", "k_ver", "fr_size", "rank", "rescore", "preview", "depth", "top_k",
            "tree_size", "gamma", "seed", "max_new_tokens", "temperature", "top_p", "backend", "slim_init", "context", "context_len")
    opts = {k: getattr(args, k) for k in keys}
    if auto and opts["shape"] is None and all(opts[k] is None for k in ("depth", "top_k", "tree_size", "gamma")):
        opts["shape"] = "auto"
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
