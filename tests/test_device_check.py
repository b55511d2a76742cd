"""device-check --tiny: every step of the GPU programme runs on a tiny random model on the CPU and writes every
output file with its documented columns; the weights chunk path reassembles exactly and refuses damaged parts."""
import csv
import json
import random
import shutil

import pytest

from core.errors import SpecError
from core.paper import SPEED_COLS
from core.train.device import TAU_COLS
from tools import chunks
from tools.device_check import GOAL_COLS, KERNEL_COLS, LOSSLESS_COLS, STEPS, main

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("device") / "check"
    rc = main(["--tiny", "--out", str(out), "--minutes", "4"])
    return out, rc


def header(path):
    with open(path, newline="") as f:
        return next(csv.reader(f))


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_every_step_finishes_ok(run):
    out, rc = run
    status = json.loads((out / "status.json").read_text())
    assert list(status) == list(STEPS)
    assert {k: v["status"] for k, v in status.items()} == {k: "ok" for k in STEPS}, status
    assert rc == 0


@pytest.mark.parametrize("name, cols", [("kernels.csv", KERNEL_COLS), ("kernels_goals.csv", GOAL_COLS),
                                        ("lossless_tiny.csv", LOSSLESS_COLS), ("lossless.csv", LOSSLESS_COLS),
                                        ("tau.csv", TAU_COLS), ("paper/table2_speed.csv", SPEED_COLS)])
def test_csv_outputs_have_the_documented_columns(run, name, cols):
    assert header(run[0] / name) == cols


def test_json_and_markdown_outputs_exist(run):
    out = run[0]
    env = json.loads((out / "env.json").read_text())
    assert {"device", "gpu", "torch", "triton", "cuda", "transformers", "copy_gbps"} <= set(env)
    assert (out / "summary.md").read_text().startswith("# device-check")
    assert (out / "paper" / "report.md").is_file()


def test_kernels_table_is_the_one_docs_kernels_md_shows_with_triton_rows_timed(run):
    from bench.suites.lm_head import COLUMNS
    lines = (run[0] / "kernels.md").read_text().splitlines()
    assert lines[0] == "```" and lines[2] == COLUMNS and lines[-1] == "```"
    triton = [r for r in rows(run[0] / "kernels.csv") if r["method"].startswith("triton")]
    assert len(triton) == 3 and all(float(r["time_us"]) > 0 for r in triton)  # the interpreter ran them


def test_every_method_and_shape_is_identical_to_greedy(run):
    for name in ("lossless_tiny.csv", "lossless.csv"):
        got = rows(run[0] / name)
        assert {(r["method"], r["shape"]) for r in got} == {(m, s) for m in ("full", "frspec", "nanospec", "slimspec",
                                                                              "nanoslim") for s in ("chain", "tree")}
        assert all(r["identical"] == "True" for r in got)


def test_trained_head_and_factors_are_saved_fp16_with_a_card(run):
    from safetensors.torch import load_file
    import torch
    head = run[0] / "head"
    for name in ("eagle.safetensors", "slim_r8.safetensors"):
        assert {t.dtype for t in load_file(str(head / name)).values()} == {torch.float16}
    assert "slim_r8.safetensors" in (head / "training_card.md").read_text()
    res = json.loads((run[0] / "train.json").read_text())
    assert res["tokens"] > 0 and res["steps"] > 0 and res["tau"]["new/full/tree"] >= 1.0


def test_weights_chunks_reassemble_to_the_same_model(run):
    res = json.loads((run[0] / "weights.json").read_text())
    assert res["parts"] > 1 and res["installed_after_call"] == res["parts"] and res["weights_equal"]


def payload(tmp_path):
    src = tmp_path / "payload.bin"
    src.write_bytes(random.Random(0).randbytes(50_000))  # incompressible: three parts of 20 kB
    return src, chunks.split([(src, "x/payload.bin")], tmp_path / "parts", 20_000)


def test_a_damaged_part_is_refused(tmp_path):
    payload(tmp_path)
    part = tmp_path / "parts" / "part-001.bin"
    part.write_bytes(b"\0" + part.read_bytes()[1:])
    with pytest.raises(SpecError, match="part-001.bin: sha256 mismatch"):
        chunks.receive(tmp_path / "parts", tmp_path / "store", cache=tmp_path / "cache")


def test_parts_install_only_once_all_have_arrived(tmp_path):
    src, manifest = payload(tmp_path)
    assert len(manifest["parts"]) == 3
    first = tmp_path / "call-1"
    first.mkdir()
    shutil.copy(tmp_path / "parts" / "manifest.json", first)
    shutil.copy(tmp_path / "parts" / "part-000.bin", first)
    got = chunks.receive(first, tmp_path / "store", cache=tmp_path / "cache")
    assert (got["have"], got["installed"]) == (1, [])
    got = chunks.receive(tmp_path / "parts", tmp_path / "store", cache=tmp_path / "cache")
    assert got["have"] == 3 and (tmp_path / "cache" / "x" / "payload.bin").read_bytes() == src.read_bytes()


def test_an_unknown_step_is_a_clear_error(tmp_path):
    from tools.device_check import cli
    assert cli(["--tiny", "--out", str(tmp_path), "--steps", "env,nope"]) == 2


def test_a_failure_after_training_keeps_the_trained_head(tmp_path, monkeypatch):
    from core.train import device

    def broken(*args, **kwargs):
        raise RuntimeError("tau failed")
    monkeypatch.setattr(device, "measure_tau", broken)
    out = tmp_path / "check"
    assert main(["--tiny", "--out", str(out), "--minutes", "2", "--steps", "train"]) != 0
    status = json.loads((out / "status.json").read_text())["train"]
    assert status["status"] == "error" and "tau failed" in status["note"]
    assert (out / "head" / "eagle.safetensors").is_file()
    assert json.loads((out / "train.json").read_text())["steps"] > 0
