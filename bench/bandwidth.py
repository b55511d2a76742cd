"""The physical limit beside every plain-decoding figure: the weight bytes one 1-token step reads (as the runner stores
them: bf16, or the GGUF's codes) over this machine's measured main-memory read bandwidth."""
import torch

from core.runtime.weights import MATRICES
from core.trace.stats import aggregate


def read_gbs(gib: float = 1.0, reps: int = 5) -> float:
    """Main-memory read bandwidth now, GB/s: the fastest of `reps` sums over a buffer far larger than the caches."""
    from bench.suites.lm_head import seconds
    x = torch.ones(int(gib * 2**30) // 4)
    return x.numel() * 4 / seconds(x.sum, x.device, reps) / 1e9


def step_bytes(model, runner=None) -> int:
    """Weight bytes one 1-token target step reads: every parameter but the input embeddings, which it only gathers
    (unless the LM head shares them); a matrix the runner multiplies on its GGUF codes counts their bytes."""
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total = total if emb is head else total - emb.numel() * emb.element_size()
    forms = [runner.head_t] + [w[k] for w in runner.layers for k in MATRICES] if runner else []
    return total + sum(getattr(f.codes, "read_bytes", f.codes.nbytes) - f.codes.n * f.codes.k * head.element_size()
                       for f in forms if f.codes is not None)


def decode_tps(rows: list) -> float:
    """Tokens a second of the rows' generation phase (their decode_tokens over decode_s: the prompt's pass left out)."""
    toks, secs = sum(r["decode_tokens"] for r in rows), sum(r["decode_s"] for r in rows)
    return toks / max(secs, 1e-9)


def memory_bound(rows: list, model, gbs: float, runner=None) -> dict:
    """The floor a decoder meets here that streams the target's weights once per token as `runner` stores them (bf16,
    or the GGUF's codes), beside our AR and transformers' generate, in wall ms per new token (prefill included), and
    our AR's generation phase alone (ms per token after the prompt's) where its rows time it."""
    ms = {v: 1000 * a["wall_s"] / max(a["new_tokens"], 1) for v in ("ar", "hf")
          if (a := aggregate([r for r in rows if r["variant"] == v]))["runs"]}
    floor = (weights := step_bytes(model, runner)) / gbs / 1e6
    if dec := [r for r in rows if r["variant"] == "ar" and r.get("decode_s")]:  # the generation phase alone
        ms["ar_decode"] = 1000 / decode_tps(dec)
    return {"weights_gb": round(weights / 1e9, 2), "read_gbs": round(gbs, 1), "floor_ms": round(floor, 1),
            **{f"{v}_ms": round(m, 1) for v, m in ms.items()},
            **({"best_x_hf": round(ms["hf"] / floor, 2)} if "hf" in ms else {})}
