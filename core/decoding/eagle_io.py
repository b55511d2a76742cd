"""EAGLE heads on disk: SpecLens's own file (save_head / load_head), the official EAGLE-1/2 layout that the EAGLE repo,
SGLang and vLLM load (save_official / load_official), EAGLE-3 checkpoints (load_eagle3_state_dict), and a drafter
loaded from a head directory (load_eagle_drafter).
"""
import json
import os
from dataclasses import asdict

import torch
import torch.nn as nn

from core.decoding.eagle import Eagle3Head, EagleConfig, EagleDrafter, EagleHead
from core.errors import SpecError
from core.paths import write_atomic


def save_head(head, out_dir, name="eagle.safetensors"):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items() if not k.startswith("rotary")}
    hf_cfg = {"eagle": asdict(head.ecfg), "llama": head.lcfg.to_dict()}
    hf_cfg["llama"].pop("quantization_config", None)
    write_atomic(os.path.join(out_dir, "config.json"), json.dumps(hf_cfg, indent=1))
    write_atomic(os.path.join(out_dir, name), lambda tmp: save_file(sd, tmp))  # the pipeline looks for this file


FIT = ("hidden_size", "vocab_size", "num_hidden_layers")  # what a head must share with its target


def check_fits(head_cfg: dict, target_cfg, head_dir, keys=FIT) -> None:
    """SpecError naming both shapes where the head was made for another target (hidden size, vocabulary, layers)."""
    bad = [k for k in keys if head_cfg.get(k) != getattr(target_cfg, k, None)]
    if bad:
        shape = lambda get: ", ".join(f"{k} {get(k)}" for k in keys)
        raise SpecError(f"the EAGLE head in {head_dir} was made for another target: head {shape(head_cfg.get)}; "
                        f"target {shape(lambda k: getattr(target_cfg, k, None))}")


def load_weights(head, sd: dict, head_dir) -> None:
    """The head's weights from `sd`, refused (SpecError naming the shapes) where one is missing or of another shape."""
    want = {k: tuple(v.shape) for k, v in head.state_dict().items() if not k.startswith("rotary")}
    got = {k: tuple(v.shape) for k, v in sd.items()}
    wrong = [f"{k} {got.get(k, 'missing')} (config says {want[k]})" for k in want if got.get(k) != want[k]]
    if wrong:
        raise SpecError(f"the EAGLE head in {head_dir} does not match its config.json: " + "; ".join(wrong[:4]))
    head.load_state_dict(sd, strict=False)


def read_head_files(head_dir, name) -> tuple:
    """(config.json as a dict, the weights' path); SpecError where either is missing."""
    cfg, weights = os.path.join(head_dir, "config.json"), os.path.join(head_dir, name)
    missing = [p for p in (cfg, weights) if not os.path.isfile(p)]
    if missing:
        raise SpecError(f"no EAGLE head in {head_dir}: {', '.join(os.path.basename(p) for p in missing)} missing "
                        "(train one with `python -m core train-eagle --target MODEL --out DIR`)")
    with open(cfg) as f:
        return json.load(f), weights


def load_head(head_dir, target_model, dtype=torch.float32, name="eagle.safetensors"):
    from safetensors.torch import load_file
    from transformers import LlamaConfig
    hf_cfg, weights = read_head_files(head_dir, name)
    check_fits(hf_cfg["llama"], target_model.config, head_dir)
    head = EagleHead(LlamaConfig(**hf_cfg["llama"]), EagleConfig(**hf_cfg["eagle"]))
    load_weights(head, {k: v.to(dtype) for k, v in load_file(weights).items()}, head_dir)
    return head.to(dtype).attach(target_model).eval()


def swap_fc_halves(w):
    """fc.weight [d, 2d]: official EAGLE/SGLang/vLLM take fc([e(x); f]), this head fc([f; e(x)]): swap the column
    halves (its own inverse)."""
    d = w.shape[1] // 2
    return torch.cat([w[:, d:], w[:, :d]], 1)


def load_official_state_dict(head, sd):
    """Load an official EAGLE-1/2 checkpoint (keys fc.*, layers.0.*; fc over [e; f]; EAGLE-1 has no input_layernorm
    and may carry embed_tokens.weight, which stays the target's). Returns the list of ignored keys."""
    ours = head.state_dict()
    mapped, ignored = {}, []
    for k, v in sd.items():
        k2 = k[len("model."):] if k.startswith("model.") else k
        if k2 in ours and ours[k2].shape == v.shape:
            mapped[k2] = (swap_fc_halves(v) if k2 == "fc.weight" else v).to(ours[k2].dtype)
        else:
            ignored.append(k)
    if "layers.0.input_layernorm.weight" not in mapped and head.ecfg.input_norm:
        head.ecfg.input_norm = False
        head.layers[0].input_layernorm = nn.Identity()
    missing = [k for k in head.state_dict() if k not in mapped and not k.startswith("rotary")]
    if missing:
        raise KeyError(f"official EAGLE state dict lacks {missing}")
    head.load_state_dict(mapped, strict=False)
    return ignored


OFFICIAL = EagleConfig(input_norm=False, final_norm=False, feature="post_norm")  # what their EAGLE-2 loaders run


OFFICIAL_WEIGHTS = "model.safetensors"


def official_config(head, architecture="LlamaForCausalLM") -> dict:
    """config.json of the official layout: the target's LlamaConfig with one layer, plus this head's conventions
    under "speclens_eagle" (other loaders ignore unknown keys). architecture: LlamaForCausalLM as in the EAGLE repo's
    checkpoints (vLLM maps it to its EAGLE class); SGLang picks its EAGLE class by the name LlamaForCausalLMEagle."""
    hf_cfg = head.lcfg.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "id2label", "label2id", "dtype"):
        hf_cfg.pop(key, None)
    rope = hf_cfg.get("rope_parameters") or {}
    hf_cfg.update(architectures=[architecture], num_hidden_layers=1, torch_dtype="float16",
                  speclens_eagle=asdict(head.ecfg))
    if "rope_theta" in rope:
        hf_cfg.setdefault("rope_theta", rope["rope_theta"])  # readers of transformers 4.x configs
    return hf_cfg


def convention_notes(ecfg: EagleConfig) -> list:
    """Where a head differs from what the official EAGLE-2 loaders compute (post-norm features in, no input norm
    on layer 0, the layer output straight into the LM head): the files load there but draft differently."""
    notes = []
    if ecfg.feature != OFFICIAL.feature:
        notes.append("the head reads pre-norm target features; EAGLE/SGLang/vLLM feed post-norm ones")
    if ecfg.input_norm:
        notes.append("layer 0 has an input RMSNorm (layers.0.input_layernorm.weight), which their layer 0 lacks")
    if ecfg.final_norm:
        notes.append("the head applies the target's final norm before the LM head; theirs does not")
    if notes:
        notes.append("`python -m core train-eagle --final-norm false` trains post-norm features and no output norm; "
                     "layer 0's input norm has no switch in train-eagle yet")
    return notes


def save_official(head, out_dir, architecture="LlamaForCausalLM") -> list:
    """Write config.json + model.safetensors (fp16) under the official names: fc.weight (columns [e; f]), fc.bias,
    layers.0.*. Returns convention_notes(head.ecfg)."""
    from safetensors.torch import save_file
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items() if not k.startswith("rotary")}
    sd["fc.weight"] = swap_fc_halves(sd["fc.weight"]).contiguous()
    os.makedirs(out_dir, exist_ok=True)
    write_atomic(os.path.join(out_dir, "config.json"), json.dumps(official_config(head, architecture), indent=1))
    write_atomic(os.path.join(out_dir, OFFICIAL_WEIGHTS), lambda tmp: save_file(sd, tmp))
    return convention_notes(head.ecfg)


def load_official(head_dir, target_model, dtype=torch.float32):
    """An EagleHead from an official-layout directory (ours, or an EAGLE-1/2 checkpoint in safetensors)."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig
    with open(os.path.join(head_dir, "config.json")) as f:
        hf_cfg = json.load(f)
    check_fits(hf_cfg, target_model.config, head_dir, FIT[:2])  # an official config counts the draft's own layers
    conventions = hf_cfg.pop("speclens_eagle", None) or asdict(OFFICIAL)
    head = EagleHead(LlamaConfig(**hf_cfg), EagleConfig(**conventions))
    load_official_state_dict(head, load_file(os.path.join(head_dir, OFFICIAL_WEIGHTS)))
    return head.to(dtype).attach(target_model).eval()


def load_eagle3_state_dict(llama_config, sd):
    draft_vocab = sd["lm_head.weight"].shape[0]
    head = Eagle3Head(llama_config, draft_vocab)
    sd = {k: v for k, v in sd.items() if not k.startswith("embed_tokens")}
    head.load_state_dict(sd, strict=False)
    return head


def load_eagle_drafter(target, head_dir, runtime="eager", weights="model"):
    """target: a Runner (or a causal LM); head_dir holds eagle.safetensors + config.json; runtime: the one the
    drafter's layer runs on (make_runner's eager | fast | auto); weights: its layer's on the fast runtime."""
    model = getattr(target, "model", target)
    W = model.get_output_embeddings().weight
    head = load_head(str(head_dir), model, dtype=W.dtype).to(W.device)
    return EagleDrafter(head, W, runtime, weights)
