"""Token-map files as serving engines load them, read without running any code they may carry.

    ids     a list of target ids, the draft's hot vocabulary in draft-row order:
            SGLang / FR-Spec `.pt` (torch.load(weights_only=True)), the project's / vLLM's JSON list
    d2t     EAGLE-3: d2t [K] int (target = i + d2t[i]), t2d [V] bool (t2d[t] = t is in the map);
            a standalone file (.safetensors, or a .pt holding a dict) or a checkpoint (a directory of
            *.safetensors / pytorch_model.bin, or one model.safetensors) whose pruned LM head has K rows

The format is read from the bytes (zip / pickle / safetensors / JSON), never from the name.
"""
import io
import json
import pickle
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.errors import SpecError

MAX_BYTES = 64 << 20  # a map file: 262k int64 ids is 2 MB; a checkpoint is read tensor by tensor instead
ID_KEYS = ("hot_token_id", "hot_token_ids", "token_map", "draft_token_map", "ids", "token_ids", "vocab")
HEAD_SUFFIX = "lm_head.weight"


class MapReadError(SpecError):
    """A file the doctor cannot read as a map; `code` names why (a check finding of severity error)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class TokenMap:
    name: str                          # what the report calls the file
    format: str                        # "pt ids" | "json ids" | "d2t" | "checkpoint"
    ids: torch.Tensor | None = None    # ids formats: the tensor as stored (any dtype / shape)
    d2t: torch.Tensor | None = None
    t2d: torch.Tensor | None = None
    head_rows: int | None = None       # checkpoint: rows of its pruned LM head (draft vocabulary size)
    config: dict = field(default_factory=dict)  # checkpoint: config.json (draft_vocab_size, vocab_size)

    def size(self) -> int | None:
        vec = self.ids if self.ids is not None else self.d2t
        return int(vec.numel()) if vec is not None else None


# ---------------------------------------------------------------- sniffing

def sniff(data: bytes) -> str:
    """"zip" (torch.save), "pickle" (legacy torch.save), "safetensors", "json" or "unknown"."""
    if data[:4] == b"PK\x03\x04":
        return "zip"
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    if len(data) >= 9:
        (n,) = struct.unpack("<Q", data[:8])
        if 0 < n <= len(data) - 8 and data[8:9] == b"{":
            return "safetensors"
    if data.lstrip()[:1] in (b"[", b"{"):
        return "json"
    return "unknown"


def unsafe_global(err: Exception) -> str:
    """The global a refused pickle asked for (e.g. 'posix.system'), else ''."""
    m = re.search(r"(?:GLOBAL|global)\s+([\w.]+)", str(err))
    return m.group(1) if m else ""


# ---------------------------------------------------------------- readers

def load_torch(data: bytes, name: str):
    """torch.load(weights_only=True): tensors and plain containers only; a pickle that imports anything else
    (os.system, eval, a class) is refused by name."""
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        what = unsafe_global(err)
        raise MapReadError("unsafe_pickle", f"{name}: refused: the pickle asks for {what or 'a non-tensor object'}, "
                           "which a map never needs and which could run code (read with weights_only=True)") from None
    except Exception as err:  # torch raises RuntimeError / EOFError / ... for truncated or foreign files
        raise MapReadError("unreadable", f"{name}: not a torch file torch.load can read ({type(err).__name__})") from None


def from_object(obj, name: str, fmt: str) -> TokenMap:
    """A TokenMap from what a .pt / JSON file held: an id tensor or list, or a dict with d2t / ids."""
    if isinstance(obj, dict):
        if "d2t" in obj or "t2d" in obj:
            return TokenMap(name, "d2t", d2t=as_tensor(obj.get("d2t"), name), t2d=as_tensor(obj.get("t2d"), name))
        key = next((k for k in ID_KEYS if k in obj), None)
        if key is None:
            raise MapReadError("unknown_format", f"{name}: a dict without d2t / t2d or an id list "
                               f"({', '.join(ID_KEYS)}); keys: {', '.join(map(str, list(obj)[:8]))}")
        obj = obj[key]
    return TokenMap(name, fmt, ids=as_tensor(obj, name))


def as_tensor(obj, name: str) -> torch.Tensor | None:
    if obj is None or isinstance(obj, torch.Tensor):
        return obj
    try:
        return torch.tensor(obj)
    except (TypeError, ValueError, RuntimeError):
        raise MapReadError("wrong_dtype", f"{name}: holds {type(obj).__name__} values, not numbers") from None


def read_json(data: bytes, name: str) -> TokenMap:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise MapReadError("unreadable", f"{name}: not valid JSON") from None
    return from_object(obj, name, "json ids")


def read_safetensors(data: bytes, name: str) -> TokenMap:
    from safetensors.torch import load
    try:
        tensors = load(data)
    except Exception as err:  # safetensors raises its own error types for bad files
        raise MapReadError("unreadable", f"{name}: not a safetensors file ({err})") from None
    return from_tensors(tensors, name, {})


def from_tensors(tensors: dict, name: str, config: dict) -> TokenMap:
    """d2t / t2d (any key prefix) and the LM head's row count from a state dict."""
    pick = lambda suffix: next((v for k, v in tensors.items() if k == suffix or k.endswith("." + suffix)), None)
    head = pick(HEAD_SUFFIX)
    d2t, t2d = pick("d2t"), pick("t2d")
    if d2t is None and t2d is None and head is None:
        ids = next((tensors[k] for k in ID_KEYS if k in tensors), None)
        if ids is None:
            raise MapReadError("unknown_format", f"{name}: safetensors without d2t, t2d, an id list or an LM head; "
                               f"tensors: {', '.join(list(tensors)[:8])}")
        return TokenMap(name, "pt ids", ids=ids)
    fmt = "checkpoint" if head is not None or config else "d2t"
    rows = int(head.shape[0]) if head is not None and head.dim() == 2 else None
    return TokenMap(name, fmt, d2t=d2t, t2d=t2d, head_rows=rows, config=config)


def read_bytes(data: bytes, name: str) -> TokenMap:
    """One map file's bytes (an upload, or a file's content)."""
    if len(data) > MAX_BYTES:
        raise MapReadError("too_large", f"{name}: {len(data) >> 20} MB, more than a map file's {MAX_BYTES >> 20} MB")
    kind = sniff(data)
    if kind in ("zip", "pickle"):
        return from_object(load_torch(data, name), name, "pt ids")
    if kind == "safetensors":
        return read_safetensors(data, name)
    if kind == "json":
        return read_json(data, name)
    raise MapReadError("unknown_format", f"{name}: neither a torch .pt, a safetensors nor a JSON file")


# ---------------------------------------------------------------- checkpoints on disk

def read_checkpoint_file(path: Path, config: dict) -> dict:
    """{name: tensor} of the map tensors in one safetensors file (the LM head as a shape-only stand-in)."""
    from safetensors import safe_open
    out = {}
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                if key.endswith(HEAD_SUFFIX):
                    out[key] = torch.empty(f.get_slice(key).get_shape(), dtype=torch.int8, device="meta")
                elif key.split(".")[-1] in ("d2t", "t2d"):
                    out[key] = f.get_tensor(key)
    except Exception as err:  # safetensors raises its own error types for bad files
        raise MapReadError("unreadable", f"{path}: not a safetensors file ({err})") from None
    return out


def read_dir(path: Path) -> TokenMap:
    """A checkpoint directory: config.json and the map tensors of its *.safetensors (or pytorch_model.bin)."""
    config = {}
    if (path / "config.json").is_file():
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            raise MapReadError("unreadable", f"{path}/config.json: not valid JSON") from None
    tensors = {}
    for f in sorted(path.glob("*.safetensors")):
        tensors |= read_checkpoint_file(f, config)
    if not tensors and (path / "pytorch_model.bin").is_file():
        obj = load_torch((path / "pytorch_model.bin").read_bytes(), str(path / "pytorch_model.bin"))
        tensors = obj if isinstance(obj, dict) else {}
    if not tensors and not config:
        raise MapReadError("unknown_format", f"{path}: a directory with no config.json, *.safetensors or pytorch_model.bin")
    return from_tensors(tensors, str(path), config)


def read_path(path) -> TokenMap:
    """A map file or checkpoint directory given on the command line."""
    path = Path(path)
    if path.is_dir():
        return read_dir(path)
    if not path.is_file():
        raise MapReadError("unreadable", f"{path}: no such file")
    if path.stat().st_size > MAX_BYTES and sniff(path.open("rb").read(16)) == "safetensors":
        return from_tensors(read_checkpoint_file(path, {}), str(path), {})  # a big model.safetensors
    return read_bytes(path.read_bytes(), str(path))


# ---------------------------------------------------------------- writers

def d2t_t2d(ids: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-3 tensors of a sorted map: d2t[i] = ids[i] - i (target = i + d2t[i]); t2d[t] = t in ids."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(len(ids)), t2d


def write_map(path, ids: torch.Tensor, vocab_size: int) -> str:
    """Write sorted ids in the format the suffix names: .pt (int64 tensor), .json (list), .safetensors (d2t, t2d)."""
    from safetensors.torch import save_file

    from core.paths import write_atomic
    path, ids = Path(path), ids.to(torch.int64).contiguous()
    if path.suffix == ".pt":
        write_atomic(path, lambda tmp: torch.save(ids, tmp))
        return "pt ids"
    if path.suffix == ".json":
        write_atomic(path, json.dumps(ids.tolist()))
        return "json ids"
    if path.suffix == ".safetensors":
        d2t, t2d = d2t_t2d(ids, vocab_size)
        write_atomic(path, lambda tmp: save_file({"d2t": d2t, "t2d": t2d}, str(tmp)))
        return "d2t"
    raise SpecError(f"{path}: --fix writes .pt, .json or .safetensors (d2t + t2d)")
