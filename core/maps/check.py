"""Named findings about one token map against one model: one function per check, named after its code.

    ids     the hot ids an engine serves: the id list itself, or i + d2t[i] for an EAGLE-3 map
    intended the ids the file means: the same where it is consistent; where d2t is broken (all zeros, off by
            one, absolute ids) the ids t2d or d2t itself names. The token checks (eos, chat, specials) and
            --fix read these.
Severity: "error" (the map serves wrong, or an engine refuses it: exit status 1) or "warning" (it serves,
but costs acceptance or breaks an assumption of some engine).
"""
from dataclasses import asdict, dataclass

import torch

from core.maps.formats import MapReadError, TokenMap
from core.maps.model import KNOWN_VOCABS, ModelFacts

TOP_FREQUENT = 100  # the model's most frequent corpus tokens every real map of >= 1000 ids holds
MAX_LISTED = 5


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # "error" | "warning"
    message: str


def error(code, message):
    return [Finding(code, "error", message)]


def warning(code, message):
    return [Finding(code, "warning", message)]


def listed(ids, facts: ModelFacts | None = None) -> str:
    ids = [int(i) for i in ids]
    shown = [facts.label(i) if facts else str(i) for i in ids[:MAX_LISTED]]
    return ", ".join(shown) + (f", … ({len(ids)} in all)" if len(ids) > MAX_LISTED else "")


def known_vocab(n: int) -> str:
    return f" ({KNOWN_VOCABS[n]}'s vocabulary size)" if n in KNOWN_VOCABS else ""


# ---------------------------------------------------------------- the vectors the checks read

def is_int(t) -> bool:
    return t is not None and not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool


def usable(t) -> bool:
    return is_int(t) and t.dim() == 1 and t.numel() > 0


def t2d_ids(m: TokenMap, f: ModelFacts):
    """The ids t2d marks, or None where t2d is absent or not a [V] mask."""
    t = m.t2d
    if t is None or t.dim() != 1 or len(t) != f.vocab_size or t.dtype.is_floating_point:
        return None
    return (t != 0).nonzero().flatten()


def hot_ids(m: TokenMap):
    """LongTensor [K] the engine serves (draft row i -> target id), or None where dtype / shape are unusable."""
    if m.ids is not None:
        return m.ids.long() if usable(m.ids) else None
    if usable(m.d2t):
        return torch.arange(len(m.d2t)) + m.d2t.long()
    return None


def d2t_fault(m: TokenMap, f: ModelFacts) -> str | None:
    """How d2t disagrees with t2d (or, without t2d, with the model): all_zeros | absolute | off_by_one |
    mismatch, or None where it is consistent (or there is no d2t to read)."""
    if m.ids is not None or not usable(m.d2t):
        return None
    d2t, hot, truth = m.d2t.long(), hot_ids(m), t2d_ids(m, f)
    same = lambda ids: truth is not None and torch.equal(torch.unique(ids), truth)
    if len(d2t) > 1 and not d2t.any():
        return None if same(hot) else "all_zeros"
    if truth is None:
        increasing = bool((d2t[1:] > d2t[:-1]).all())
        absolute = increasing and hot.max() >= f.vocab_size and d2t.min() >= 0 and d2t.max() < f.vocab_size
        return "absolute" if absolute else None
    if same(hot):
        return None
    if same(d2t):
        return "absolute"
    if same(hot + 1) or same(hot - 1):
        return "off_by_one"
    return "mismatch"


def intended_ids(m: TokenMap, f: ModelFacts):
    """The ids the file means (see the module docstring), or None where they cannot be read."""
    fault, truth = d2t_fault(m, f), t2d_ids(m, f)
    if fault == "absolute":
        return m.d2t.long()
    if fault == "mismatch":
        return None  # which of d2t and t2d is meant, nothing says
    if fault is not None and truth is not None:
        return truth
    hot = hot_ids(m)
    if hot is None and m.ids is None and m.d2t is None:
        return truth
    return hot


def valid_ids(m: TokenMap, f: ModelFacts):
    """intended_ids where every id lies in [0, V), else None."""
    ids = intended_ids(m, f)
    if ids is None or not len(ids) or ids.min() < 0 or ids.max() >= f.vocab_size:
        return None
    return ids


# ---------------------------------------------------------------- checks: the tensors

def check_wrong_dtype(m: TokenMap, f: ModelFacts) -> list:
    out = []
    for name, t in (("ids", m.ids), ("d2t", m.d2t)):
        if t is None or not t.numel():
            continue
        if t.dtype == torch.bool and t.dim() == 1 and len(t) == f.vocab_size:
            out += error("wrong_dtype", f"{name} is a bool mask of length V = {len(t)}: a t2d, not a list of ids")
        elif not is_int(t):
            out += error("wrong_dtype", f"{name} is {str(t.dtype).removeprefix('torch.')}: engines index the LM "
                         "head's rows with int64 ids")
        elif t.dtype != torch.int64:
            out += warning("wrong_dtype", f"{name} is {str(t.dtype).removeprefix('torch.')}, not int64: SGLang "
                           "and vLLM cast it, EAGLE-3 loaders copy it into an int64 buffer")
    if m.t2d is not None and m.t2d.dtype != torch.bool:
        sev = error if m.t2d.dtype.is_floating_point else warning
        out += sev("wrong_dtype", f"t2d is {str(m.t2d.dtype).removeprefix('torch.')}, not bool")
    return out


def check_wrong_shape(m: TokenMap, f: ModelFacts) -> list:
    out = []
    for name, t in (("ids", m.ids), ("d2t", m.d2t), ("t2d", m.t2d)):
        if t is not None and t.dim() != 1:
            out += error("wrong_shape", f"{name} has shape {list(t.shape)}: engines read a 1-D tensor")
    return out


def check_empty_map(m: TokenMap, f: ModelFacts) -> list:
    if m.ids is None and m.d2t is None and m.t2d is None:
        return []  # a checkpoint without d2t: check_d2t_missing says so
    if m.size() == 0 or (m.ids is None and m.d2t is None and t2d_ids(m, f) is not None and not t2d_ids(m, f).numel()):
        return error("empty_map", "the map holds no ids")
    return []


def check_vocab_size_mismatch(m: TokenMap, f: ModelFacts) -> list:
    out = []
    if m.t2d is not None and m.t2d.dim() == 1 and len(m.t2d) != f.vocab_size:
        out += error("vocab_size_mismatch", f"t2d has {len(m.t2d)} entries{known_vocab(len(m.t2d))}, the model's "
                     f"vocabulary {f.vocab_size}: the map was built for another tokenizer")
    n = m.config.get("vocab_size")
    if isinstance(n, int) and n != f.vocab_size:
        out += error("vocab_size_mismatch", f"config.json says vocab_size {n}{known_vocab(n)}, the model has "
                     f"{f.vocab_size}: the checkpoint belongs to another tokenizer")
    return out


def check_ids_out_of_range(m: TokenMap, f: ModelFacts) -> list:
    ids = hot_ids(m)
    if ids is None or not len(ids) or d2t_fault(m, f):  # a d2t fault finding names the cause
        return []
    bad = ids[(ids < 0) | (ids >= f.vocab_size)]
    if not len(bad):
        return []
    bigger = [f"{name} ({n})" for n, name in KNOWN_VOCABS.items() if n > int(ids.max()) >= 0]
    hint = f"; it fits {', '.join(bigger[:3])}" if ids.max() >= f.vocab_size and bigger else ""
    return error("ids_out_of_range", f"{len(bad)} ids outside [0, {f.vocab_size}) (min {int(ids.min())}, max "
                 f"{int(ids.max())}): a map for another tokenizer{hint}")


def check_ids_in_padding(m: TokenMap, f: ModelFacts) -> list:
    ids = valid_ids(m, f)
    if ids is None or f.tokenizer_size >= f.vocab_size:
        return []
    pad = ids[ids >= f.tokenizer_size]
    if not len(pad):
        return []
    return warning("ids_in_padding", f"{len(pad)} ids in [{f.tokenizer_size}, {f.vocab_size}): padding rows of the "
                   "LM head that no text produces, wasted draft rows")


def check_duplicate_ids(m: TokenMap, f: ModelFacts) -> list:
    ids = hot_ids(m)
    if ids is None:
        return []
    values, counts = torch.unique(ids, return_counts=True)
    dup = values[counts > 1]
    if not len(dup):
        return []
    return error("duplicate_ids", f"{int((counts - 1).sum())} duplicate ids ({listed(dup)}): the map holds "
                 f"{len(values)} distinct ids in {len(ids)} rows, and a draft tree proposes the same token twice")


def check_unsorted_ids(m: TokenMap, f: ModelFacts) -> list:
    ids = hot_ids(m)
    if ids is None or len(ids) < 2 or bool((ids[1:] >= ids[:-1]).all()) or d2t_fault(m, f):
        return []
    where = ("vLLM sorts the ids itself, SGLang serves them in file order (both fine); EAGLE-3 d2t / t2d "
             "assume increasing ids" if m.ids is not None else "EAGLE-3 maps are increasing (t2d cannot say the order)")
    return warning("unsorted_ids", f"ids are not in increasing order ({where})")


# ---------------------------------------------------------------- checks: EAGLE-3 d2t / t2d

def check_d2t_missing(m: TokenMap, f: ModelFacts) -> list:
    if m.ids is not None or m.d2t is not None:
        return []
    rows = m.head_rows or m.config.get("draft_vocab_size")
    if m.format == "checkpoint" and isinstance(rows, int) and rows < f.vocab_size:
        return error("d2t_missing", f"the checkpoint's LM head has {rows} rows (< V = {f.vocab_size}) but no d2t: "
                     "engines then map draft row i to target id i (d2t stays zeros) and acceptance collapses")
    if m.t2d is not None:
        return warning("d2t_missing", "t2d without d2t: vLLM and SGLang read d2t (--fix writes it from t2d)")
    return []


def check_t2d_missing(m: TokenMap, f: ModelFacts) -> list:
    if m.d2t is None or m.t2d is not None:
        return []
    return warning("t2d_missing", "d2t without t2d: vLLM and SGLang serve from d2t alone; EAGLE-3 training "
                   "code reads t2d (--fix writes it)")


def check_head_rows_mismatch(m: TokenMap, f: ModelFacts) -> list:
    if not usable(m.d2t):
        return []
    out = []
    for what, rows in (("LM head", m.head_rows), ("config.json draft_vocab_size", m.config.get("draft_vocab_size"))):
        if isinstance(rows, int) and rows != len(m.d2t):
            out += error("head_rows_mismatch", f"d2t has {len(m.d2t)} entries, the {what} {rows} rows")
    return out


def check_d2t_all_zeros(m: TokenMap, f: ModelFacts) -> list:
    fault = d2t_fault(m, f)
    if fault == "all_zeros":
        return error("d2t_all_zeros", f"d2t is all zeros: the served ids are 0..{len(m.d2t) - 1}, what an unset "
                     "d2t buffer gives (a checkpoint saved before d2t was filled, a loader that never copied it)"
                     + ("; t2d names other ids" if m.t2d is not None else ""))
    if fault is None and usable(m.d2t) and len(m.d2t) > 1 and not m.d2t.any():
        return warning("d2t_all_zeros", f"d2t is all zeros and t2d agrees: the map is the id prefix 0..{len(m.d2t) - 1}, "
                       "rarely a frequency map (check how it was built)")
    return []


def check_d2t_absolute(m: TokenMap, f: ModelFacts) -> list:
    if d2t_fault(m, f) != "absolute":
        return []
    return error("d2t_absolute", "d2t holds the target ids themselves; EAGLE-3 stores offsets "
                 "(target = i + d2t[i], so d2t[i] = id[i] - i)")


def check_d2t_off_by_one(m: TokenMap, f: ModelFacts) -> list:
    if d2t_fault(m, f) != "off_by_one":
        return []
    hot, truth = hot_ids(m), t2d_ids(m, f)
    sign = "+1" if torch.equal(torch.unique(hot + 1), truth) else "-1"
    return error("d2t_off_by_one", f"i + d2t[i] is one off the ids t2d marks (t2d = i + d2t[i] {sign}): every "
                 "draft row proposes its neighbour's token")


def check_d2t_t2d_mismatch(m: TokenMap, f: ModelFacts) -> list:
    if d2t_fault(m, f) != "mismatch":
        return []
    hot, truth = set(hot_ids(m).tolist()), set(t2d_ids(m, f).tolist())
    return error("d2t_t2d_mismatch", f"d2t and t2d name different maps: {len(hot - truth)} ids only in d2t "
                 f"({listed(sorted(hot - truth))}), {len(truth - hot)} only in t2d ({listed(sorted(truth - hot))})")


# ---------------------------------------------------------------- checks: the tokens a map needs

def missing(m: TokenMap, f: ModelFacts, wanted) -> list:
    ids = valid_ids(m, f)
    if ids is None:
        return []
    have = set(ids.tolist())
    return [i for i in wanted if i not in have]


def check_eos_missing(m: TokenMap, f: ModelFacts) -> list:
    gone = missing(m, f, f.eos_ids)
    if not gone:
        return []
    return error("eos_missing", f"end-of-sequence token {listed(gone, f)} not in the map: the draft can never "
                 "propose the end of an answer (vLLM adds EOS itself, SGLang and EAGLE-3 heads do not)")


def check_chat_tokens_missing(m: TokenMap, f: ModelFacts) -> list:
    gone = missing(m, f, [i for i in f.chat_ids if i not in f.eos_ids])
    if not gone:
        return []
    return warning("chat_tokens_missing", f"chat-template tokens {listed(gone, f)} not in the map: the draft cannot "
                   "propose the turn markers the target writes")


def check_special_tokens_missing(m: TokenMap, f: ModelFacts) -> list:
    gone = missing(m, f, [i for i in f.special_ids if i not in set(f.eos_ids) | set(f.chat_ids)])
    if not gone:
        return []
    return warning("special_tokens_missing", f"special tokens {listed(gone, f)} not in the map")


def check_frequent_tokens_missing(m: TokenMap, f: ModelFacts) -> list:
    ids = valid_ids(m, f)
    if ids is None or f.ranks is None or len(ids) < 10 * TOP_FREQUENT:
        return []
    top = (f.ranks < TOP_FREQUENT).nonzero().flatten()
    gone = top[~torch.isin(top, ids)]
    if len(gone) < TOP_FREQUENT // 10:
        return []
    return warning("frequent_tokens_missing", f"{len(gone)} of the model's {TOP_FREQUENT} most frequent corpus tokens "
                   f"are not in a map of {len(ids)} ids: built for another tokenizer or another text?")


CHECKS = (check_wrong_dtype, check_wrong_shape, check_empty_map, check_vocab_size_mismatch, check_ids_out_of_range,
          check_ids_in_padding, check_duplicate_ids, check_unsorted_ids, check_d2t_missing, check_t2d_missing,
          check_head_rows_mismatch, check_d2t_all_zeros, check_d2t_absolute, check_d2t_off_by_one,
          check_d2t_t2d_mismatch, check_eos_missing, check_chat_tokens_missing, check_special_tokens_missing,
          check_frequent_tokens_missing)


def check_map(m: TokenMap, f: ModelFacts) -> list:
    return [finding for check in CHECKS for finding in check(m, f)]


def report(name: str, m: TokenMap | None, f: ModelFacts, read_error: MapReadError | None = None) -> dict:
    """A plain dict (the CLI prints it, viz renders it): file, format, size, model, findings, status."""
    findings = [Finding(read_error.code, "error", str(read_error).removeprefix(f"{name}: "))] if read_error else check_map(m, f)
    status = "error" if any(x.severity == "error" for x in findings) else "warning" if findings else "ok"
    return {"file": name, "format": m.format if m else None, "size": m.size() if m else None, "model": f.name,
            "vocab_size": f.vocab_size, "findings": [asdict(x) for x in findings], "status": status}
