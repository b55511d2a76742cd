"""Bad input, fuzzed: engine settings, command-line options and uploaded prompt files either give a
clear SpecError or a correct result, never another exception or a hang (hypothesis, tiny random model)."""
import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.config import (BACKENDS, MAX_NEW_TOKENS, MAX_TREE, MAX_W_MAX, METHODS, SHAPES, WINDOWS,
                         SpecConfig)
from core.decoding.draft import ModelDrafter
from core.decoding.engine import generate
from core.errors import SpecError
from core.decoding.freq import frspec_ids
from core.decoding.heads import build_head
from core.prompts import CATEGORIES, MAX_LINE, Prompt, load_prompts
from core.runtime.runner import EagerRunner
from core.trace.stats import compare_to_ar, tokens_of

pytestmark = pytest.mark.usefixtures("single_thread")
VOCAB, D = 300, 64
PROMPT = torch.randint(3, VOCAB, (12,), generator=torch.Generator().manual_seed(5)).tolist()
QUICK = settings(max_examples=60, deadline=10_000, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
RUNS = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
INT_BOUNDS = {"w_max": (1, MAX_W_MAX), "k_pre": (0, 64), "k_ver": (0, 64), "fr_size": (1, MAX_W_MAX),
              "depth": (1, 16), "top_k": (1, 16), "tree_size": (1, MAX_TREE), "gamma": (1, 16),
              "max_new_tokens": (1, MAX_NEW_TOKENS)}
CHOICE_FIELDS = {"method": METHODS, "shape": SHAPES, "window": WINDOWS, "backend": BACKENDS}


def one_line_message(err: SpecError) -> bool:
    text = str(err)
    return bool(text.strip()) and "\n" not in text and "Traceback" not in text


def run_tiny(model, cfg, prompt=PROMPT):
    """One generation on the tiny model, the way tests/test_lossless_tiny.py builds it."""
    target = EagerRunner(model)
    if cfg.method == "ar":
        return list(generate(target, None, None, prompt, cfg, eos_ids={2}))
    drafter = ModelDrafter(EagerRunner(model))
    fr_ids = frspec_ids(torch.arange(VOCAB), cfg.fr_size, always=[2]) if cfg.method == "frspec" else None
    head = build_head(cfg.method, drafter.head_weight, cfg, fr_ids=fr_ids)
    return list(generate(target, drafter, head, prompt, cfg, eos_ids={2}))


# ---------------------------------------------------------------- engine settings

def out_of_range(lo, hi):
    return st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
                     st.sampled_from([lo - 1, hi + 1, -2**63, 2**64]))


@QUICK
@given(name=st.sampled_from(sorted(INT_BOUNDS)), data=st.data())
def test_an_out_of_range_integer_setting_is_a_spec_error_naming_it(name, data):
    value = data.draw(out_of_range(*INT_BOUNDS[name]))
    with pytest.raises(SpecError, match=name) as err:
        SpecConfig(**{name: value}).validate(VOCAB, D)
    assert one_line_message(err.value)


@QUICK
@given(name=st.sampled_from(sorted(INT_BOUNDS)),
       value=st.one_of(st.floats(allow_nan=True), st.text(max_size=6), st.none(), st.booleans(),
                       st.lists(st.integers(), max_size=2)))
def test_a_non_integer_integer_setting_is_a_spec_error_naming_it(name, value):
    with pytest.raises(SpecError, match=name):
        SpecConfig(**{name: value}).validate(VOCAB, D)


@QUICK
@given(name=st.sampled_from(sorted(CHOICE_FIELDS)),
       value=st.one_of(st.text(max_size=12), st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)))
@example(name="method", value="NanoSpec")
@example(name="method", value="../../etc/passwd")
def test_an_unknown_choice_is_a_spec_error_listing_the_choices(name, value):
    cfg = SpecConfig(**{name: value})
    if value in CHOICE_FIELDS[name]:
        assert cfg.validate(VOCAB, D) is cfg
        return
    with pytest.raises(SpecError, match=f"{name} must be one of") as err:
        cfg.validate(VOCAB, D)
    assert one_line_message(err.value)


@QUICK
@given(temperature=st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=10.000001),
                             st.just(float("nan")), st.just(float("inf"))),
       top_p=st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.000001), st.just(float("nan"))))
def test_an_out_of_range_temperature_or_top_p_is_a_spec_error(temperature, top_p):
    with pytest.raises(SpecError, match="temperature"):
        SpecConfig(temperature=temperature).validate(VOCAB, D)
    with pytest.raises(SpecError, match="top_p"):
        SpecConfig(top_p=top_p).validate(VOCAB, D)


@pytest.mark.parametrize("field, value", [("temperature", "0.5"), ("temperature", None), ("top_p", "x"),
                                          ("rank", "3")])
def test_a_wrong_typed_float_or_rank_setting_is_a_spec_error(field, value):
    with pytest.raises(SpecError, match=field):
        SpecConfig(**{field: value}).validate(VOCAB, D)


@pytest.mark.parametrize("field, value", [("seed", 2**70), ("seed", "x"), ("seed", -1), ("rank", 1.5)])
def test_a_seed_or_rank_the_engine_cannot_use_is_a_spec_error(field, value):
    with pytest.raises(SpecError, match=field):
        SpecConfig(**{field: value}).validate(VOCAB, D)


def test_a_vanishing_positive_temperature_is_rejected_or_runs(tiny_target):
    cfg = SpecConfig(method="full", temperature=1e-100, max_new_tokens=4)
    try:
        cfg.validate(VOCAB, D)
    except SpecError:
        return
    assert len(tokens_of(run_tiny(tiny_target, cfg))) == 4


def test_a_rank_above_the_model_width_is_a_spec_error():
    with pytest.raises(SpecError, match="rank"):
        SpecConfig(rank=D + 1).validate(VOCAB, D)


def test_unknown_settings_from_a_dict_are_a_spec_error():
    with pytest.raises(SpecError, match="unknown setting"):
        SpecConfig.from_dict({"method": "full", "tree_szie": 8})


@st.composite
def valid_configs(draw):
    """Settings validate() accepts, biased to the edges, with short runs (at most 10 tokens)."""
    def edge(lo, hi, cap=None):
        top = min(hi, cap or hi)
        return draw(st.one_of(st.sampled_from([lo, top]), st.integers(lo, top)))
    return SpecConfig(
        method=draw(st.sampled_from(["full", "frspec", "nanospec", "slimspec", "nanoslim", "ar"])),
        shape=draw(st.sampled_from(["tree", "chain"])), window=draw(st.sampled_from(["suffix", "fifo"])),
        w_max=edge(1, MAX_W_MAX), k_pre=edge(0, 64), k_ver=edge(0, 64), fr_size=edge(1, MAX_W_MAX),
        rank=edge(0, D), depth=edge(1, 16, 8), top_k=edge(1, 16), tree_size=edge(1, MAX_TREE),
        gamma=edge(1, 16, 8), max_new_tokens=edge(1, 10),
        temperature=draw(st.one_of(st.just(0.0), st.floats(0.05, 10.0))),  # below 0.01: rejected by validate
        top_p=draw(st.one_of(st.just(1.0), st.floats(0.01, 1.0))), seed=edge(0, 2**63 - 1))


@RUNS
@given(cfg=valid_configs())
def test_any_accepted_setting_runs_within_its_budget_over_real_token_ids(tiny_target, cfg):
    cfg.validate(VOCAB, D)
    tokens = tokens_of(run_tiny(tiny_target, cfg))
    assert 1 <= len(tokens) <= cfg.max_new_tokens
    assert all(0 <= t < VOCAB for t in tokens)


@RUNS
@given(cfg=valid_configs())
def test_any_accepted_greedy_setting_is_lossless(tiny_target, cfg):
    cfg = SpecConfig(**{**cfg.to_dict(), "temperature": 0.0}).validate(VOCAB, D)
    ar = run_tiny(tiny_target, SpecConfig(method="ar", max_new_tokens=cfg.max_new_tokens))
    cmp = compare_to_ar(run_tiny(tiny_target, cfg), ar)
    assert cmp["identical"], (cfg, cmp)


# ---------------------------------------------------------------- command line

def run_cli(argv) -> tuple:
    """(exit code, stderr) of `python -m core ...` run in-process; no model loads for rejected input."""
    from core.cli import dispatch
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = dispatch(argv)
        except SystemExit as e:  # argparse's own usage errors
            code = e.code
    return code, err.getvalue()


@QUICK
@given(name=st.sampled_from(sorted(INT_BOUNDS)), data=st.data())
def test_an_out_of_range_cli_option_exits_2_with_one_error_line(name, data):
    value = data.draw(out_of_range(*INT_BOUNDS[name]))
    code, err = run_cli(["generate", "--prompt", "hi", "--" + name.replace("_", "-"), str(value)])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and name in lines[0], err


@QUICK
@given(name=st.sampled_from(sorted(INT_BOUNDS) + ["temperature", "top_p"]),
       junk=st.text(min_size=1, max_size=8).filter(lambda s: not _is_number(s) and not s.startswith("-")))
def test_a_non_numeric_cli_option_exits_2_with_a_usage_message(name, junk):
    code, err = run_cli(["generate", "--prompt", "hi", "--" + name.replace("_", "-"), junk])
    assert code == 2 and "invalid" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.5", "10.5"])
def test_a_non_finite_or_out_of_range_cli_temperature_is_rejected(value):
    code, err = run_cli(["generate", "--prompt", "hi", f"--temperature={value}"])
    assert code == 2 and err.startswith("error: temperature"), err


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------- uploaded prompt files

def load_bytes(data: bytes) -> list:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "upload.jsonl"
        path.write_bytes(data)
        return load_prompts(path)


def valid_or_spec_error(data: bytes):
    """The property every uploaded file must have: prompts with sane fields, or one clear SpecError."""
    try:
        prompts = load_bytes(data)
    except SpecError as err:
        assert one_line_message(err) and "upload.jsonl" in str(err)
        return None
    assert prompts and all(isinstance(p, Prompt) for p in prompts)
    assert all(isinstance(p.id, str) and isinstance(p.text, str) and p.category in CATEGORIES for p in prompts)
    return prompts


@QUICK
@given(st.binary(max_size=2000))
@example(b"")
@example(b"\xff\xfe\x00junk")
@example(b"\n\n  \n")
@example(b"\x00" * 64)
def test_binary_junk_is_prompts_or_a_spec_error(data):
    valid_or_spec_error(data)


@QUICK
@given(st.text(max_size=400))
@example("\ufeff{\"task_id\": 1, \"prompt\": \"x\"}")
@example("null\n[]\n42")
def test_any_unicode_text_is_prompts_or_a_spec_error(text):
    valid_or_spec_error(text.encode("utf-8"))


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
KNOWN_CATEGORIES = st.sampled_from(list(CATEGORIES) + ["writing", "translation", "math_reasoning", "bogus"])
ROWS = st.fixed_dictionaries({}, optional={
    "question_id": st.one_of(SCALARS, st.lists(SCALARS, max_size=2)),
    "category": st.one_of(SCALARS, KNOWN_CATEGORIES),  # unhashable categories: see the regression test
    "turns": st.one_of(SCALARS, st.lists(st.one_of(st.text(max_size=20), SCALARS), max_size=3)),
    "task_id": st.one_of(SCALARS, st.lists(SCALARS, max_size=2)),
    "prompt": st.one_of(st.text(max_size=40), SCALARS),
    "extra": SCALARS})


@QUICK
@given(st.lists(ROWS, min_size=1, max_size=5))
def test_rows_with_wrong_or_missing_fields_are_prompts_or_a_spec_error(rows):
    valid_or_spec_error("\n".join(json.dumps(r) for r in rows).encode("utf-8"))


@QUICK
@given(size=st.integers(MAX_LINE + 1, MAX_LINE * 3), good_first=st.booleans())
def test_a_huge_line_is_a_spec_error_naming_the_limit(size, good_first):
    head = b'{"task_id": 1, "prompt": "x"}\n' if good_first else b""
    with pytest.raises(SpecError, match=f"longer than {MAX_LINE}"):
        load_bytes(head + b"a" * size)


def test_a_valid_upload_parses_as_data_only():
    row = {"task_id": "__import__('os').system('x')", "prompt": "{{7*7}} $(rm -rf /) <script>"}
    (p,) = load_bytes(json.dumps(row).encode())
    assert p == Prompt("__import__('os').system('x')", "code", "{{7*7}} $(rm -rf /) <script>")


@pytest.mark.parametrize("line", [
    json.dumps({"question_id": 1, "category": ["qa"], "turns": ["a"]}),
    json.dumps({"question_id": "a", "category": {"x": 1}, "turns": ["a"]}),
    "[" * 50_000,   # nesting deeper than the JSON decoder's recursion limit
    "1" * 5_000,    # an integer past Python's 4300-digit conversion limit (ValueError)
], ids=["list-category", "dict-category", "deep-nesting", "huge-integer"])
def test_pathological_rows_are_spec_errors(line):
    with pytest.raises(SpecError, match="upload.jsonl:1"):
        load_bytes(line.encode())
