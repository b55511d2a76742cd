"""core/decoding/protocols.py: every Runner, Drafter and Head the engine can be handed satisfies its Protocol
(members present, and each method takes the Protocol's parameters, in order)."""
import inspect
import typing

import pytest
import torch

from conftest import peaky_tiny
from core.decoding import protocols as interfaces
from core.config import SpecConfig
from core.decoding.draft import DraftState, ModelDrafter
from core.decoding.eagle import EagleDrafter, EagleHead
from core.decoding.heads import build_head
from core.runtime.runner import EagerRunner
from core.runtime.fast import FastRunner

METHODS = ("full", "frspec", "nanospec", "slimspec", "nanoslim")


def protocol_methods(proto) -> list:
    return [name for name, v in vars(proto).items() if inspect.isfunction(v) and not name.startswith("_")]


def unmet(obj, proto) -> list:
    """Members of `proto` that `obj` lacks, and methods whose leading parameters differ from the Protocol's."""
    missing = [m for m in typing.get_type_hints(proto) if not hasattr(obj, m)]
    for name in protocol_methods(proto):
        want = list(inspect.signature(getattr(proto, name)).parameters)[1:]  # less self
        got = list(inspect.signature(getattr(obj, name)).parameters)[:len(want)]
        if got != want:
            missing.append(f"{name}{tuple(want)} (has {tuple(got)})")
    return missing


@pytest.fixture(scope="module")
def tiny():
    return peaky_tiny(0, vocab=300)


@pytest.fixture(scope="module")
def runners(tiny):
    return {"eager": EagerRunner(tiny), "fast": FastRunner(tiny)}


@pytest.mark.parametrize("kind", ["eager", "fast"])
def test_each_runner_satisfies_the_runner_protocol(runners, kind):
    assert isinstance(runners[kind], interfaces.Runner)
    assert unmet(runners[kind], interfaces.Runner) == []


def test_each_drafter_satisfies_the_drafter_protocol(runners, tiny):
    drafters = [ModelDrafter(runners["eager"]), EagleDrafter(EagleHead(tiny.config).attach(tiny), tiny.lm_head.weight)]
    for drafter in drafters:
        assert isinstance(drafter, interfaces.Drafter), type(drafter).__name__
        assert unmet(drafter, interfaces.Drafter) == [], type(drafter).__name__


def test_the_draft_state_satisfies_its_protocol():
    assert isinstance(DraftState(torch.zeros(1, 4)), interfaces.DraftState)


@pytest.mark.parametrize("method", METHODS)
def test_each_head_satisfies_the_head_protocol(tiny, method):
    W = tiny.lm_head.weight.detach()
    head = build_head(method, W, SpecConfig(method=method, w_max=64), fr_ids=torch.arange(32))
    assert isinstance(head, interfaces.Head)
    assert unmet(head, interfaces.Head) == []


def test_a_runner_missing_a_member_does_not_satisfy_the_protocol(runners):
    class NoCommit:
        def __init__(self, r):
            self.__dict__.update({k: getattr(r, k) for k in typing.get_type_hints(interfaces.Runner)})
            self.reset, self.forward, self.logits = r.reset, r.forward, r.logits
    assert not isinstance(NoCommit(runners["eager"]), interfaces.Runner)
