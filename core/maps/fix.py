"""--fix: a repaired map where the repair is unambiguous, and the list of what changed.

Repaired: ids squeezed to 1-D and cast to int64, sorted, deduplicated; EOS, the chat-template tokens and the
special tokens added (id lists only: an EAGLE-3 map's size is its head's row count); d2t recomputed from t2d
(all zeros, off by one, absolute ids) and t2d from d2t. Refused, with the reason: ids outside the model's
vocabulary or of another tokenizer's size (no repair makes a map for another tokenizer right), float ids, a
d2t and t2d that disagree in no known way, a checkpoint without d2t (only its training knows the ids).
"""
import torch

from core.errors import SpecError
from core.maps.check import check_map, d2t_fault, t2d_ids
from core.maps.formats import TokenMap, write_map
from core.maps.model import ModelFacts

UNFIXABLE = {"ids_out_of_range": "ids outside the model's vocabulary", "vocab_size_mismatch": "another tokenizer's size",
             "d2t_t2d_mismatch": "d2t and t2d disagree in no known way", "d2t_missing": "no d2t to recover the ids from",
             "empty_map": "no ids", "unsafe_pickle": "refused file"}


def refusal(m: TokenMap, f: ModelFacts) -> str | None:
    """Why no repair is unambiguous, or None."""
    codes = {x.code for x in check_map(m, f) if x.severity == "error"}
    hit = [why for code, why in UNFIXABLE.items() if code in codes]
    vec = m.ids if m.ids is not None else m.d2t
    if vec is not None and (vec.dtype.is_floating_point or vec.dtype == torch.bool):
        hit.append("ids that are not integers")
    if m.d2t is not None and m.d2t.dim() != 1:
        hit.append("a d2t that is not 1-D")
    if m.ids is None and m.d2t is None and t2d_ids(m, f) is None:
        hit.append("no ids to repair")
    return "; ".join(hit) or None


def repaired_ids(m: TokenMap, f: ModelFacts) -> tuple[torch.Tensor, list]:
    """(sorted int64 ids, what changed) of an id-list map: squeeze, cast, dedup, sort, add needed tokens."""
    changes, ids = [], m.ids
    if ids.dim() != 1:
        changes.append(f"flattened shape {list(ids.shape)} to [{ids.numel()}]")
        ids = ids.reshape(-1)
    if ids.dtype != torch.int64:
        changes.append(f"cast {str(ids.dtype).removeprefix('torch.')} to int64")
        ids = ids.long()
    unique = torch.unique(ids)  # sorted
    if len(unique) < len(ids):
        changes.append(f"removed {len(ids) - len(unique)} duplicate ids")
    if len(ids) > 1 and not bool((ids[1:] >= ids[:-1]).all()):
        changes.append("sorted the ids (draft row order follows)")
    for what, wanted in (("end-of-sequence", f.eos_ids), ("chat-template", f.chat_ids), ("special", f.special_ids)):
        add = [i for i in wanted if not bool((unique == i).any())]
        if add:
            changes.append(f"added {what} tokens " + ", ".join(f.label(i) for i in add))
            unique = torch.unique(torch.cat([unique, torch.tensor(add, dtype=torch.long)]))
    return unique, changes


def repaired_d2t(m: TokenMap, f: ModelFacts) -> tuple[torch.Tensor, list]:
    """(sorted int64 ids, what changed) of an EAGLE-3 map; its size stays the head's row count."""
    fault, truth = d2t_fault(m, f), t2d_ids(m, f)
    if m.d2t is None:
        return truth, ["wrote d2t from t2d"]
    changes = []
    if m.d2t.dtype != torch.int64:
        changes.append(f"cast d2t from {str(m.d2t.dtype).removeprefix('torch.')} to int64")
    if fault == "absolute":
        ids = m.d2t.long()
        changes.append("d2t held the ids themselves: rewrote it as offsets, d2t[i] = id[i] - i")
    elif fault is not None:
        ids = truth
        changes.append(f"recomputed d2t from t2d (d2t was {fault.replace('_', ' ')})")
    else:
        ids = torch.arange(len(m.d2t)) + m.d2t.long()
    if m.t2d is None:
        changes.append("wrote t2d from d2t")
    elif m.t2d.dtype != torch.bool:
        changes.append(f"cast t2d from {str(m.t2d.dtype).removeprefix('torch.')} to bool")
    if len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise SpecError("d2t's ids are not increasing: reordering them would reorder the head's rows; not repaired")
    return ids, changes


def repair(m: TokenMap, f: ModelFacts) -> tuple[torch.Tensor, list]:
    """(ids of the repaired map, changes); SpecError naming why where no repair is unambiguous."""
    why = refusal(m, f)
    if why:
        raise SpecError(f"{m.name}: not repaired ({why}); rebuild the map, e.g. with python -m core export")
    return repaired_ids(m, f) if m.ids is not None else repaired_d2t(m, f)


def fix_to(m: TokenMap, f: ModelFacts, out) -> list:
    """Write the repaired map to `out` (format by suffix: .pt, .json, .safetensors); the changes, in words."""
    ids, changes = repair(m, f)
    fmt = write_map(out, ids, f.vocab_size)
    if (m.format in ("d2t", "checkpoint")) != (fmt == "d2t"):
        changes.append(f"converted {m.format} to {fmt}")
    return changes or ["nothing to repair: the same map, rewritten"]
