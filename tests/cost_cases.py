"""What tests/test_calibrate.py and tests/test_cost_choose.py share: a tiny random pipeline, quick calibration settings
and the costs measured with them (each module-scoped: measured once per test module). Imported fixtures, named for the
tests by `name=`: pipe, args, costs."""
from types import SimpleNamespace

import pytest
import torch

from conftest import peaky_tiny
from core.cost import measure
from core.decoding.draft import ModelDrafter
from tools.tiny import tiny_tokenizer
from core.pipeline import Pipeline
from core.runtime.fast import make_runner

VOCAB = 300


@pytest.fixture(scope="module", name="pipe")
def tiny_pipe() -> Pipeline:
    model, tokenizer = peaky_tiny(0, VOCAB), tiny_tokenizer(VOCAB)
    drafter = ModelDrafter(make_runner(model, tokenizer, "eager"), "self")
    ranks = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))
    return Pipeline("tiny-calibrate", model, tokenizer, make_runner(model, tokenizer, "eager"), drafter, "self", ranks)


@pytest.fixture(scope="module", name="args")
def quick_args():
    return SimpleNamespace(rows=6, width=3, contexts="8,24", reps=1, methods=["full", "nanospec"], limit=1,
                           max_new_tokens=6)


@pytest.fixture(scope="module", name="costs")
def measured_costs(pipe, args, single_thread):
    with torch.no_grad():
        return measure.measure_costs(pipe, args, progress=lambda msg: None)
