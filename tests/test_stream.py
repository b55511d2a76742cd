"""The candidate stream's incremental I_t is exactly Unique(Suffix(S, W_max)), and the repack buffer follows it."""
import random

import pytest
import torch

from core.config import SpecConfig
from core.decoding.heads import build_head
from core.decoding.stream import CandidateStream

V = 200


def random_chunks(seed, steps=60):
    rng = random.Random(seed)
    for _ in range(steps):
        yield [([rng.randrange(V) for _ in range(rng.randrange(0, 12))], rng.choice(["draft", "verify"]))
               for _ in range(2)]


@pytest.mark.parametrize("w_max", [1, 7, 32, 500])
def test_incremental_window_equals_brute_force_suffix(w_max):
    s, history = CandidateStream(V, w_max), []
    for chunks in random_chunks(w_max):
        s.append(chunks)
        for ids, _ in chunks:
            history += ids
        assert set(s.active_ids().tolist()) == set(history[-w_max:])


@pytest.mark.parametrize("w_max", [1, 7, 32])
def test_active_vocabulary_never_exceeds_w_max(w_max):
    s = CandidateStream(V, w_max)
    for chunks in random_chunks(1):
        assert s.append(chunks).active <= w_max


def test_entered_and_left_are_the_net_change_of_a_step():
    s = CandidateStream(V, 16)
    before = set()
    for chunks in random_chunks(2):
        ev = s.append(chunks)
        after = set(s.active_ids().tolist())
        assert {i for i, _ in ev.entered} == after - before
        assert set(ev.left) == before - after
        before = after


def test_entered_ids_carry_the_source_that_brought_them():
    s = CandidateStream(V, 100)
    ev = s.append([([1, 2], "prompt"), ([2, 3], "prefill")])
    assert dict(ev.entered) == {1: "prompt", 2: "prompt", 3: "prefill"}


def test_fifo_window_keeps_the_last_w_max_unique_ids_in_arrival_order():
    s = CandidateStream(V, 3, mode="fifo")
    s.append([([5, 6, 5, 7], "prompt")])
    s.append([([6, 8], "draft")])  # 6 is already in: no refresh; 8 pushes out 5
    assert set(s.active_ids().tolist()) == {6, 7, 8}


def test_stream_size_counts_every_entry_of_s():
    s = CandidateStream(V, 4)
    assert s.append([([1, 1, 2], "prompt"), ([3] * 5, "prefill")]).size_s == 8


@pytest.mark.parametrize("method", ["nanospec", "nanoslim"])
def test_repack_buffer_rows_equal_the_rows_of_active_ids_at_every_step(method):
    torch.manual_seed(0)
    W = torch.randn(V, 24)
    head = build_head(method, W, SpecConfig(method=method, w_max=20, rank=6))
    for chunks in random_chunks(3):
        ev = head.stream.append(chunks)
        head._apply(ev)
        ids = head.active_ids()
        assert torch.equal(head.buf[: ids.numel()], head.rows[ids])
