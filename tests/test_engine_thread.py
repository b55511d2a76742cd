"""The engine thread (core/engine_thread.py): every job of the app on one long-lived thread, in order."""
import contextvars
import threading

import pytest
import torch

import core.engine_thread as engine_thread
from core.engine_thread import EngineThread


def test_every_job_runs_on_one_and_the_same_thread():
    names = {engine_thread.call(lambda: threading.get_ident()) for _ in range(5)}
    callers = set()
    for _ in range(3):
        t = threading.Thread(target=lambda: callers.add(engine_thread.call(threading.get_ident)))
        t.start()
        t.join()
    assert len(names | callers) == 1 and threading.get_ident() not in names


def test_jobs_run_in_the_order_submitted():
    engine, seen = EngineThread(), []
    futures = [engine.submit(seen.append, i) for i in range(20)]
    for f in futures:
        f.result()
    assert seen == list(range(20))


def test_an_error_reaches_the_caller():
    with pytest.raises(ZeroDivisionError):
        engine_thread.call(lambda: 1 / 0)
    assert engine_thread.call(lambda: 2) == 2  # the thread lives on


def test_a_call_from_the_engine_thread_runs_directly_instead_of_waiting_on_itself():
    assert engine_thread.call(lambda: engine_thread.call(lambda: 7)) == 7


def test_jobs_see_the_callers_context_and_run_without_autograd():
    var = contextvars.ContextVar("v", default="unset")
    var.set("caller's")
    assert engine_thread.call(var.get) == "caller's"
    assert engine_thread.call(torch.is_grad_enabled) is False


def test_a_queued_job_cancelled_before_it_starts_never_runs():
    engine, gate, ran = EngineThread(), threading.Event(), []
    engine.submit(gate.wait)
    queued = engine.submit(ran.append, 1)
    assert queued.cancel()
    gate.set()
    engine.call(lambda: None)
    assert ran == []


def test_an_idle_engine_thread_ends_and_the_next_job_starts_another(monkeypatch):
    monkeypatch.setattr("core.engine_thread.IDLE_S", 0.05)
    engine = EngineThread()
    first = engine.submit(threading.current_thread).result()
    first.join(timeout=5)
    assert not first.is_alive()
    second = engine.submit(threading.current_thread).result()
    assert second is not first and second.is_alive()


def test_the_apps_pair_offer_probes_oneDNN_on_the_engine_thread_not_the_main_one(monkeypatch):
    import core.pipeline
    from ui.models import pair_offer
    seen = []
    monkeypatch.setattr(core.pipeline, "inference_dtype", lambda: seen.append(threading.current_thread().name) or torch.float32)
    pair_offer()
    assert seen == [engine_thread.NAME]
