"""Pipeline: a loaded target + drafter + tables, shared per process; `run` streams StepRecords.

The app, the CLI and the benchmarks all go through here, so they see the same engine and trace.
"""
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

from core.config import DRAFT_WEIGHTS, SpecConfig
from core.cost.choose import chosen_arithmetic
from core.decoding.draft import ModelDrafter
from core.decoding.eagle import EagleDrafter
from core.decoding.engine import generate
from core.decoding.heads import build_head, svd_factors, uses_factors
from core.decoding.protocols import Drafter, Head, Runner
from core.errors import SpecError
from core.models import DEFAULT_MODEL, chat_prompt_ids, check_same_tokenizer, load_model, model_alias
from core.paths import ASSETS
from core.runtime.config import FastConfig
from core.runtime.fast import make_runner
from core.runtime.quant import q8_blocks_here
from core.runtime.weights import codes_math, has_blocks

_LOADED = {}
_LOAD_LOCK = threading.Lock()


def inference_dtype(device=None, runtime="auto") -> torch.dtype:
    """bf16 on CUDA, and on a CPU where oneDNN runs bf16 products (AMX / avx512_bf16) for the fast runtime
    (Pipeline keeps it only where the runner's verify rows are bit-identical to 1-token decoding:
    `FastRunner.exact_reason`); else fp32. The offline models are 4-bit GGUFs and the Hub checkpoints bf16:
    bf16 weights lose nothing the model had."""
    from core.models import default_device
    if torch.device(device or default_device()).type == "cuda":
        return torch.bfloat16
    if runtime == "eager":
        return torch.float32
    from core.runtime.weights import packed_ok
    return torch.bfloat16 if packed_ok() else torch.float32


def runtime_note(runner) -> str:
    """What runs the target, for the UI: 'fast', or which path and why when it is not the fastest."""
    name = getattr(runner, "runtime_name", "eager")
    dtype = getattr(getattr(runner, "head_weight", None), "dtype", None)
    name += {torch.bfloat16: " bf16", torch.float32: " fp32"}.get(dtype, "")
    if getattr(runner, "on_codes", False):
        variant = getattr(runner, "codes_variant", "")
        name += f" on its GGUF codes ({variant})" if variant else " on its GGUF codes"
    why = getattr(runner, "fallback_reason", "") or getattr(runner, "kernels_reason", "")
    exact = "exact" if getattr(runner, "exact_reason", None) == "" else "lossless up to rounding"
    if getattr(runner, "one_thread", False):
        exact += "; kernels on one thread (built without OpenMP)"
    if name.startswith("fast") and why:
        return f"{name}, torch ops ({why}), {exact}"
    return f"{name} ({why}), {exact}" if why else f"{name}, {exact}"


def draft_note(drafter) -> str:
    """'; draft weights int4' where a draft model runs on quantized weights, '; draft on its GGUF codes (...)' where
    it multiplies by its own blocks, '; draft on the eager runtime' where its layers run there, else ''."""
    runner = getattr(drafter, "runner", None)
    if getattr(runner, "runtime_name", "") == "eager":
        return "; draft on the eager runtime"
    weights = getattr(getattr(runner, "fast_cfg", None), "weights", "model")
    if weights != "model":
        return f"; draft weights {weights}"
    variant = getattr(runner, "codes_variant", "") if getattr(runner, "on_codes", False) else ""
    return f"; draft on its GGUF codes ({variant})" if variant else ""


def head_dir(model_id) -> Path:
    return ASSETS / "heads" / (model_alias(model_id) or model_id.replace("/", "--"))


def slim_file(rank: int, own: bool) -> str:
    """SlimSpec factors' file name in head_dir: trained on the EAGLE head's outputs, or on the model's own final
    hidden states (own: the factors a model gets as a draft model, of another target or of itself)."""
    return f"slim_own_r{rank}.safetensors" if own else f"slim_r{rank}.safetensors"


def read_slim(path, W) -> tuple:
    """(W_up, W_down) of a SlimSpec factors file, in W's dtype and device: free rows are stored as W_up; tied rows
    as K [r, d] alone (the 0.5B's: 0.4 MB where its W_up takes 34), rebuilt over the LM head W they were trained on."""
    from safetensors.torch import load_file
    sd = load_file(str(path))
    up = sd["W_up"] if "W_up" in sd else tied_up(W, sd["K"])
    return up.to(W.device, W.dtype), sd["W_down"].to(W.device, W.dtype)


def tied_up(W, K):
    K = K.float().to(W.device)
    # W_up = W K^T [V, r], rounded to fp16 as free rows are stored; 16k rows at a time (no fp32 copy of W)
    return torch.cat([(w.float() @ K.T).half() for w in W.split(16384)])


def make_drafter(model_id, model, tokenizer, target: Runner, draft="auto", runtime="auto", draft_weights="auto") -> tuple:
    """(drafter, draft name). draft: "auto" (the shipped EAGLE head if there is one, else "self"), "self",
    "eagle", or a draft model id sharing the target's tokenizer. draft_weights: a draft model's layer weights
    (see draft_weights_of)."""
    draft = resolve_draft(model_id, draft)
    if draft == "self":
        return ModelDrafter(make_runner(model, tokenizer, runtime), "self"), "self"
    if draft == "context":  # prompt lookup alone (core/decoding/context.py): no draft model, no draft head
        return None, "context"
    if draft == "eagle":
        from core.decoding.eagle_io import load_eagle_drafter
        # the layer follows the target's runtime; "fast" -> "auto": a head the fast path cannot run uses eager;
        # its draft weights apply where the fast runtime may run it (the CPU)
        fast_here = runtime != "eager" and torch.device(getattr(target, "device", "cpu")).type == "cpu"
        weights = draft_weights_of(draft_weights, target.head_weight.dtype, eagle=True) if fast_here else "model"
        return load_eagle_drafter(target, head_dir(model_id), "auto" if runtime == "fast" else runtime, weights), "eagle"
    draft_model, draft_tok = load_model(draft, device=target.device, dtype=target.head_weight.dtype)
    check_same_tokenizer(tokenizer, draft_tok)
    return model_drafter(draft_model, draft_tok, draft, runtime, draft_weights), draft


def resolve_draft(model_id, draft="auto") -> str:
    """The draft a name stands for: "auto" is the shipped EAGLE head where there is one, else "self"."""
    if draft == "auto":
        return "eagle" if (head_dir(model_id) / "eagle.safetensors").exists() else "self"
    return draft


def target_config(model_id, draft, dtype, device="cpu") -> tuple:
    """(the target's FastConfig, a note): SPECLENS_GGUF_MATH=auto takes the calibrated arithmetic where both are
    recorded for this machine, model pair and dtype (core/cost/choose.py). A model on an accelerator runs eager:
    the CPU kernels are neither asked nor compiled for it."""
    fc = FastConfig()
    if fc.codes_math != "auto" or torch.device(device).type != "cpu":
        return fc, ""
    rule = codes_math(fc, dtype)
    math, note = chosen_arithmetic(model_id, resolve_draft(model_id, draft), str(dtype).removeprefix("torch."), rule)
    return (fc if math in ("", rule) else replace(fc, codes_math=math)), note


def draft_weights_of(draft_weights: str, dtype, on_blocks: bool = False, eagle: bool = False) -> str:
    """auto -> the model's own weights for a draft converted from a GGUF whose blocks q8_mm multiplies here
    (`on_blocks`: see draft_config), int4 for another bf16 draft model (measured: docs/qwen.md), int8 for an EAGLE
    head's layer where q8_mm runs (the 0.5B's and SmolLM2's heads: first drafts and tau as on their own weights, the
    layer's pass 0.4x as long: docs/runtime.md), else the model's own."""
    if draft_weights not in DRAFT_WEIGHTS:
        raise SpecError(f"unknown draft weights {draft_weights!r}: use {', '.join(DRAFT_WEIGHTS)}")
    if draft_weights == "auto" and eagle:
        return "int8" if q8_blocks_here() else "model"
    if draft_weights == "auto":
        return "int4" if dtype == torch.bfloat16 and not on_blocks else "model"
    return draft_weights


def draft_config(draft_model, draft_weights: str = "auto") -> FastConfig:
    """A draft model's FastConfig. Its own weights, where it was converted from a GGUF and q8_mm runs here, are its
    GGUF blocks with int8 activations, every layer in one C call (SPECLENS_GGUF_MATH, where set, chooses instead):
    Qwen2.5-Coder-0.5B's pass of 1 / 4 rows 12.6 / 16.7 ms against 14.5 / 20.7 on int4 (AVX-512 cap, 2 threads,
    docs/runtime.md). int8 / int4 quantize the layers from the model's weights."""
    on_blocks = has_blocks(draft_model)
    weights = draft_weights_of(draft_weights, draft_model.dtype, on_blocks)
    if weights == "model" and on_blocks and FastConfig().codes_math == "auto":
        return FastConfig(codes_math="int8")
    return FastConfig(weights=weights)


def model_drafter(draft_model, tokenizer, name, runtime="auto", draft_weights="auto"):
    """A ModelDrafter on a separate draft model, on the weights draft_config picks (the draft only proposes: the
    target's verification keeps the output exact whatever the draft's weights)."""
    return ModelDrafter(make_runner(draft_model, tokenizer, runtime, draft_config(draft_model, draft_weights)), name)


def load_fr_ranks(model_id, vocab_size):
    """The FR-Spec frequency ranks shipped for this model (assets/freq/), else None."""
    from core.decoding.freq import load_ranks
    from core.models import freq_table
    try:
        return load_ranks(freq_table(model_alias(model_id) or model_id), vocab_size)
    except (SpecError, FileNotFoundError):
        return None


def load_key(model_id, draft="auto", runtime="auto", device=None, dtype=None, draft_weights="auto") -> tuple:
    """The settings one loaded Pipeline per process stands for (Pipeline.load's cache key)."""
    return model_id, draft, runtime, str(device), str(dtype), draft_weights


class Pipeline:
    """A target Runner, a Drafter and the model's tables; `Pipeline.load` builds one from a model id."""

    def __init__(self, model_id, model, tokenizer, target: Runner, drafter: Drafter | None, draft_name, fr_rank=None,
                 math_note=""):
        self.model_id, self.model, self.tokenizer = model_id, model, tokenizer
        self.target = target
        self.runtime_name = target.runtime_name
        self.products_note = runtime_note(target) + draft_note(drafter)  # what a calibration's costs depend on
        self.math_note = math_note  # why this GGUF arithmetic (core/cost/choose.py), "" where auto's rule chose
        self.runtime_note = self.products_note + (f"; {math_note}" if math_note else "")
        self.vocab_size = target.vocab_size
        self.drafter, self.draft_name = drafter, draft_name
        self.fr_rank = fr_rank
        self._slim = {}
        self._requantized = {}  # draft weights -> Pipeline (with_draft_weights)
        self.lock = threading.Lock()

    @classmethod
    def load(cls, model_id=DEFAULT_MODEL, draft="auto", runtime="auto", device=None, dtype=None,
             draft_weights="auto") -> "Pipeline":
        """The factory: load the model, pick the runtime and the drafter; one Pipeline per settings per process."""
        key = load_key(model_id, draft, runtime, device, dtype, draft_weights)
        with _LOAD_LOCK:
            if key not in _LOADED:
                model, tokenizer = load_model(model_id, device=device, dtype=dtype or inference_dtype(device, runtime))
                fc, note = target_config(model_id, draft, model.dtype, model.device)
                target = make_runner(model, tokenizer, runtime, fc)
                if dtype is None and model.dtype == torch.bfloat16 and getattr(target, "exact_reason", ""):
                    # auto keeps bf16 only where its verify rows are exact; elsewhere fp32, whose ties are rarer
                    model, tokenizer = load_model(model_id, device=device, dtype=torch.float32)
                    fc, note = target_config(model_id, draft, model.dtype, model.device)
                    target = make_runner(model, tokenizer, runtime, fc)
                drafter, draft_name = make_drafter(model_id, model, tokenizer, target, draft, runtime, draft_weights)
                _LOADED[key] = cls(model_id, model, tokenizer, target, drafter, draft_name,
                                   load_fr_ranks(model_id, target.vocab_size), note)
            return _LOADED[key]

    def with_draft_weights(self, draft_weights: str) -> "Pipeline":
        """This pipeline with its draft model's or EAGLE head's layer weights re-quantized (same target, draft and
        tables; one per draft weights); itself for the self-draft and the context alone."""
        if self.draft_name in ("self", "context"):
            return self
        if draft_weights not in self._requantized:
            runner = self.drafter.runner
            if self.draft_name == "eagle":
                weights = draft_weights_of(draft_weights, self.drafter.dtype, eagle=True)
                drafter = EagleDrafter(self.drafter.head, self.drafter.head_weight, "auto", weights)
            else:
                drafter = model_drafter(runner.model, runner.tokenizer, self.draft_name, "auto", draft_weights)
            self._requantized[draft_weights] = Pipeline(self.model_id, self.model, self.tokenizer, self.target,
                                                        drafter, self.draft_name, self.fr_rank, self.math_note)
        return self._requantized[draft_weights]

    def slim_factors(self, rank: int, init: str = "trained"):
        """init "trained": the SlimSpec factors shipped with the head when they match, else truncated SVD;
        init "svd": truncated SVD of W (training-free)."""
        W = self.drafter.head_weight
        rank = rank or max(W.shape[1] // 8, 1)
        if (rank, init) not in self._slim:
            trained = self._trained_slim(rank) if init == "trained" else None
            self._slim[(rank, init)] = trained or svd_factors(W, rank)
        return self._slim[(rank, init)]

    def slim_trained(self, rank: int) -> bool:
        """Whether slim_factors(rank, "trained") finds trained factors (else it falls back to SVD)."""
        return self._slim_path(rank or max(self.drafter.head_weight.shape[1] // 8, 1)) is not None

    def _slim_path(self, rank):
        """The trained factors of the drafter's head: beside the EAGLE head (else the target's own: the head's outputs
        stand for the target's final hidden states, over the same W), or the draft model's own ("self": the
        target's)."""
        if self.drafter is None:
            return None
        owner = self.model_id if self.draft_name in ("eagle", "self") else self.draft_name
        kinds = (False, True) if self.draft_name == "eagle" else (True,)
        paths = [head_dir(owner) / slim_file(rank, own=own) for own in kinds]
        return next((p for p in paths if p.exists()), None)

    def _trained_slim(self, rank):
        path = self._slim_path(rank)
        if path is None:
            return None
        return read_slim(path, self.drafter.head_weight)

    def prompt_ids(self, prompt: str, chat=True) -> list:
        if not prompt or not prompt.strip():
            raise SpecError("the prompt is empty")
        return chat_prompt_ids(self.tokenizer, prompt) if chat else self.tokenizer.encode(prompt)

    def build_head(self, cfg: SpecConfig) -> Head | None:
        if cfg.method == "ar" or self.drafter is None:
            return None
        fr_ids = None
        if cfg.method == "frspec":
            if self.fr_rank is None:
                raise SpecError(f"no frequency table for {self.model_id}: build one with python -m core freq")
            from core.decoding.freq import frspec_ids, special_ids
            fr_ids = frspec_ids(self.fr_rank, cfg.fr_size, special_ids(self.tokenizer))
        slim = self.slim_factors(cfg.rank, cfg.slim_init) if uses_factors(cfg.method, cfg.preview) else None
        return build_head(cfg.method, self.drafter.head_weight, cfg, fr_ids, slim, cfg.backend)

    def eos_ids(self) -> set:
        ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
        return {i for i in ids if i is not None}

    def decode_tokens(self, ids) -> list:
        return [self.tokenizer.decode([int(i)]) for i in ids]

    def run(self, prompt: str, cfg: SpecConfig, chat=True, should_stop=lambda: False, prompt_ids=None,
            max_seconds=None):
        """Stream StepRecords for one generation (one run at a time per pipeline: runners hold caches).
        max_seconds: wall-clock cap from the start of generation; the run ends with what it produced,
        its last record marked cut="time limit"."""
        cfg.validate(self.vocab_size, self.drafter.d if self.drafter is not None else None)
        from core.cost.choose import resolve_shape, switch_prior
        if cfg.shape == "auto":
            cfg = resolve_shape(self, cfg)[0]
        ids = prompt_ids if prompt_ids is not None else self.prompt_ids(prompt, chat)
        alone = cfg.shape == "context"  # no model draft: the context drafter's branches alone
        head = None if alone else self.build_head(cfg)
        drafter = None if alone else self.drafter
        prior = switch_prior(self, cfg) if drafter is not None and cfg.method != "ar" else None
        with self.lock:
            t0 = time.monotonic()

            def stop():
                if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                    return "time limit"
                return should_stop()
            yield from generate(self.target, drafter, head, ids, cfg, self.eos_ids(), self.fr_rank,
                                self.tokenizer.decode, stop, prior)
