"""Trace JSON files: {"meta": {...}, "records": [StepRecord dicts]}; the shipped example lives in assets/."""
import json
from pathlib import Path

from core.paths import ASSETS, write_atomic

EXAMPLE_PATH = ASSETS / "example_trace.json"


def new_trace(meta: dict) -> dict:
    m = {"version": 1, "vocab": {}}
    m.update(meta)
    return {"meta": m, "records": []}


def record_token_ids(rec: dict) -> set:
    """Every token id a record shows: tree nodes, emitted tokens, stream entries and departures."""
    st = rec.get("stream") or {}
    ids = set((rec.get("tree") or {}).get("tokens", [])) | set(rec.get("emitted", []))
    ids |= {e[0] for e in st.get("entered", [])} | set(st.get("left", []))
    ids |= {t for _, chunk in st.get("appended", []) for t in chunk}
    return {int(i) for i in ids if i is not None}


def missing_ids(trace: dict, rec: dict) -> list:
    vocab = trace["meta"].setdefault("vocab", {})
    return sorted(i for i in record_token_ids(rec) if str(i) not in vocab)


def add_vocab(trace: dict, ids: list, strings: list) -> None:
    vocab = trace["meta"].setdefault("vocab", {})
    for i, s in zip(ids, strings):
        vocab[str(int(i))] = s


def save_trace(trace: dict, path) -> Path:
    """Write atomically (core/paths.py): the app reads this file back at start."""
    return write_atomic(path, json.dumps(trace, ensure_ascii=False, separators=(",", ":"), default=_json_default))


def load_trace(path) -> dict:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or "records" not in data:
        raise ValueError(f"{path}: not a SpecLens trace (needs 'meta' and 'records')")
    data.setdefault("meta", {}).setdefault("vocab", {})
    return data


def load_example() -> dict | None:
    """The shipped example trace, or None when it is missing or unreadable."""
    try:
        return load_trace(EXAMPLE_PATH)
    except (OSError, ValueError):
        return None


def round_floats(trace: dict, ndigits: int = 4) -> dict:
    """Shrinks a trace for shipping: floats rounded (JSON size), structure unchanged."""
    return json.loads(json.dumps(trace, default=_json_default), parse_float=lambda s: round(float(s), ndigits))


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
