"""The trainers' shared skeleton (train-eagle, train-slim): CLI from a config dataclass, the lr schedule,
a progress log, training time across resumes, and resumable atomic checkpoints.

    tcfg = parse_config(TrainConfig, argv, "python -m core train-x")   # --field-name per dataclass field
    log = progress_log(path)                  # log(msg): stdout + the file, time-stamped
    ck = load_checkpoint(path, settings)      # None, or the dict save_checkpoint wrote (same settings)
    set_lr(opt, lr_at(step, steps, lr, warmup, frac))
"""
import argparse
import dataclasses
import math
import os
import time
import typing

import torch

from core.errors import SpecError
from core.paths import write_atomic

# ---------------------------------------------------------------- CLI

def parse_bool(s: str) -> bool:
    v = s.lower()
    if v not in ("1", "true", "yes", "0", "false", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {s!r}")
    return v in ("1", "true", "yes")


def _arg_type(hint):
    """int | None -> int; plain types unchanged."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def config_parser(cls, prog: str) -> argparse.ArgumentParser:
    """--field-name for each field of the dataclass `cls`: its type and default; a field without a default is
    required; a bool takes true/false, or nothing (= true); metadata["help"] is its help text."""
    ap = argparse.ArgumentParser(prog=prog)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name, typ = "--" + f.name.replace("_", "-"), _arg_type(hints[f.name])
        kw = {"help": f.metadata.get("help")}
        if f.default is dataclasses.MISSING:
            kw["required"] = True
        else:
            kw["default"] = f.default
        if typ is bool:
            kw |= {"type": parse_bool, "nargs": "?", "const": True, "metavar": "true|false"}
        else:
            kw["type"] = typ
        ap.add_argument(name, **kw)
    return ap


def parse_config(cls, argv, prog: str):
    """The dataclass `cls` from command-line flags."""
    return cls(**vars(config_parser(cls, prog).parse_args(argv)))


# ---------------------------------------------------------------- schedule

def lr_at(step: int, steps: int, lr: float, warmup: int, frac: float = 0.0) -> float:
    """lr for 0-based `step`: linear warmup over `warmup` steps, then cosine from lr down to 0.1 lr at `steps`;
    progress x = max(step fraction, `frac`) (a wall-clock budget's fraction spent: the schedule follows time)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    x = max((step - warmup) / max(1, steps - warmup), frac)
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, x))))


def set_lr(opt, lr: float) -> None:
    """Every param group at lr, times the group's own "scale" where it has one."""
    for g in opt.param_groups:
        g["lr"] = lr * g.get("scale", 1.0)


def due(step: int, every: int, last: int) -> bool:
    """Whether a periodic action (log, eval, checkpoint) runs after `step`: every `every` steps and at the last."""
    return step == last or every > 0 and step % every == 0


class Stopwatch:
    """Training seconds across resumes: `spent` from the checkpoint plus this run's."""

    def __init__(self, spent: float = 0.0):
        self.t0 = time.time() - spent

    def seconds(self) -> float:
        return time.time() - self.t0


# ---------------------------------------------------------------- log + checkpoints

def progress_log(path):
    """log(msg): print it and append it to `path`, each line prefixed with the time of day."""
    def log(msg):
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        with open(path, "a") as f:
            f.write(line + "\n")
    return log


def save_checkpoint(path, state: dict) -> None:
    """torch.save(state) at `path`, atomically: a kill mid-write leaves the previous checkpoint."""
    write_atomic(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path, settings=None, map_location=None):
    """The checkpoint dict at `path`, or None if there is none; SpecError if it records other `settings`
    (a checkpoint without settings is accepted)."""
    if not path or not os.path.exists(path):
        return None
    ck = torch.load(path, weights_only=False, map_location=map_location)
    if settings is not None and ck.get("settings", settings) != settings:
        raise SpecError(f"{path} was made with {ck['settings']}, not {settings}: use another --out or delete it")
    return ck


def logger(tcfg):
    """log(msg) to stdout and DIR/progress.log."""
    return progress_log(os.path.join(tcfg.out, "progress.log"))
