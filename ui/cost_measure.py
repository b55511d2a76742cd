"""This machine's calibration, measured in the background once per model pair (python -m core calibrate's defaults:
core/cost/measure.py), so that the "Will it pay here?" panel can predict. Off with SPECLENS_CALIBRATE=0 (the test
suite's default)."""
import os
import sys
import threading
import time
import traceback

import core.engine_thread as engine_thread
from core.cost import measure
from core.cost.store import cached

_STATE = {}  # model key -> {"state": "running" | "done" | "failed", "step": str, "t0": float}
_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get("SPECLENS_CALIBRATE", "1") != "0"


def status(model_key: str) -> dict:
    """{"state", "step", "seconds"} of this pair's background calibration ({} where none ran in this process)."""
    s = dict(_STATE.get(model_key, {}))
    if s:
        s["seconds"] = round(time.monotonic() - s.pop("t0"), 1)
    return s


def start(model_key: str, pipe) -> bool:
    """Measures this pair's costs unless they are cached, measuring, or the switch is off: a daemon thread submits
    each curve to the engine thread (core.engine_thread), so a visitor's run waits for one curve at most."""
    if not enabled() or pipe.drafter is None or cached(pipe)[0] is not None:
        return False
    with _LOCK:
        if _STATE.get(model_key, {}).get("state") in ("running", "done"):
            return False
        _STATE[model_key] = {"state": "running", "step": "starting", "t0": time.monotonic()}
    threading.Thread(target=_work, args=(model_key, pipe), daemon=True, name="speclens-calibrate").start()
    return True


def _work(model_key: str, pipe) -> None:
    def progress(msg):
        _STATE[model_key]["step"] = msg
    try:
        measure.save_costs(pipe, measure.defaults(), progress, run=engine_thread.call)
        _STATE[model_key].update(state="done", step="")
    except Exception as e:  # the app keeps serving; the panel says the calibration failed
        traceback.print_exc()
        print(f"[speclens] calibration of {model_key} failed: {e}", file=sys.stderr)
        _STATE[model_key].update(state="failed", step=f"{type(e).__name__}: {e}")
