"""Bad input on the command line: one line naming the problem, a non-zero exit, no traceback."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args):
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("args, needle", [
    (["generate", "--prompt", "hi", "--w-max", "0"], "w_max"),
    (["generate", "--prompt", "hi", "--max-new-tokens", "0"], "max_new_tokens"),
    (["generate", "--prompt", "hi", "--model", "no-such-model-xyz"], "no-such-model-xyz"),
    (["generate", "--prompt", "   "], "prompt is empty"),
    pytest.param(["generate", "--prompt", "hi", "--rank", "100000"], "rank", marks=pytest.mark.model),  # checked against the model
    (["bench", "--methods", "full,bogus", "--out", "/tmp/speclens-bench-bad"], "bogus"),
])
def test_bad_input_gives_a_one_line_error(args, needle):
    r = cli(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and needle in err[0], r.stderr


def test_unknown_subcommand_prints_usage():
    r = cli("frobnicate")
    assert r.returncode == 2 and "usage" in r.stderr


@pytest.mark.model
def test_generate_json_has_the_documented_keys():
    import json
    r = cli("generate", "--prompt", "Name a colour.", "--method", "nanospec", "--max-new-tokens", "8",
            "--compare-ar", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("text", "new_tokens", "steps", "draft_calls", "mean_accept_len", "mean_active_vocab", "coverage",
                "timing_ms", "tokens_per_s", "identical_to_ar", "ar_tokens_per_s", "runtime_note"):
        assert key in out
    assert set(out["timing_ms"]) == {"draft_backbone", "lm_head", "gather", "verify", "other", "total"}
    assert out["identical_to_ar"] is True


def engine_args(*argv):
    import argparse
    from core.args import add_engine_args
    p = argparse.ArgumentParser()
    add_engine_args(p)
    return p.parse_args(list(argv))


def test_a_model_with_measured_draft_defaults_gets_them_unless_options_are_given(monkeypatch):
    from core import models
    from core.args import config_from
    alias = models.ALIASES["qwen2.5-coder-1.5b-instruct"]
    monkeypatch.setitem(models.ALIASES, "qwen2.5-coder-1.5b-instruct",
                        models.Alias(**{**alias.__dict__, "draft_defaults": (("shape", "chain"), ("gamma", 4))}))
    cfg = config_from(engine_args("--model", "qwen2.5-coder-1.5b-instruct"), "nanospec")
    assert (cfg.shape, cfg.gamma) == ("chain", 4)
    cfg = config_from(engine_args("--model", "qwen2.5-coder-1.5b-instruct", "--gamma", "2"), "nanospec")
    assert (cfg.shape, cfg.gamma) == ("chain", 2)
    from core.config import SpecConfig
    default = config_from(engine_args(), "nanospec")
    assert (default.shape, default.depth, default.gamma) == (SpecConfig.shape, SpecConfig.depth, SpecConfig.gamma)


def test_draft_weights_auto_quantizes_only_a_bf16_draft_model_without_gguf_blocks():
    import torch
    from core.errors import SpecError
    from core.pipeline import draft_weights_of
    assert draft_weights_of("auto", torch.bfloat16) == "int4"
    assert draft_weights_of("auto", torch.bfloat16, on_blocks=True) == "model"
    assert draft_weights_of("auto", torch.float32) == "model"
    assert draft_weights_of("int8", torch.float32) == "int8"
    with pytest.raises(SpecError, match="int2"):
        draft_weights_of("int2", torch.bfloat16)


def test_draft_weights_auto_puts_an_eagle_layer_on_int8_blocks_where_q8_mm_runs(monkeypatch):
    import torch
    from core.pipeline import draft_weights_of
    for runs, want in ((True, "int8"), (False, "model")):
        monkeypatch.setattr("core.kernels.cpu.gguf_q8.available", lambda: runs)
        assert draft_weights_of("auto", torch.bfloat16, eagle=True) == want
        assert draft_weights_of("auto", torch.float32, eagle=True) == want
    assert draft_weights_of("model", torch.bfloat16, eagle=True) == "model"


def test_the_paper_figures_are_skipped_not_fatal_where_plotly_is_missing(monkeypatch, capsys):
    from core import cli
    monkeypatch.setitem(sys.modules, "viz.paper", None)
    assert cli.drawing() is None
    assert "figures not drawn" in capsys.readouterr().err
