"""Shared fixtures: tiny random models for engine specs, one default-model pipeline per session."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (transformers does)
os.environ.setdefault("SPECLENS_CALIBRATE", "0")  # no background calibration in the app under test (ui/cost_measure.py)
import socket
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def peaky_tiny(seed=0, vocab=300, scale=8.0):
    """A tiny random llama whose next-token distributions are peaked (random init is near-uniform,
    which would make every greedy step a near-tie)."""
    from tools.tiny import tiny_model
    m = tiny_model(seed=seed, vocab=vocab)
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
    return m


@pytest.fixture(scope="session")
def tiny_target():
    return peaky_tiny(0)


def pytest_collection_modifyitems(items):
    """A test that takes the default_pipeline fixture (directly or through another fixture) loads the real
    model: it is marked `model`, so `-m "not model"` leaves it out."""
    for item in items:
        if "default_pipeline" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def default_pipeline():
    from core.pipeline import Pipeline
    return Pipeline.load()


@pytest.fixture(scope="module")
def single_thread():
    """Tiny models are all per-op overhead: one thread avoids thread wake-ups dominating."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@contextmanager
def served_app():
    """The Gradio app on a free loopback port for the duration of the block; yields its URL."""
    import app
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = app.build_demo(hub=False)
    app.launch(demo, port=port, host="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def pytest_terminal_summary(terminalreporter):
    """The run's peak resident memory, in every log: this process's and its largest child's (the app processes,
    CLI subprocesses and builds the tests start)."""
    import resource
    own, child = (resource.getrusage(who).ru_maxrss / 2 ** 20 for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    terminalreporter.write_line(f"peak resident memory: {own:.2f} GB (pytest), {child:.2f} GB (largest child process)")
