"""The token-map doctor (core/maps): every bug class in tests/fixtures/maps/ is named, clean maps pass, unsafe
pickles are refused by name, --fix repairs only what is unambiguous, and coverage / acceptance are measured."""
import io
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.cli import dispatch
from core.errors import SpecError
from core.maps.check import check_map
from core.maps.compare import served_ids, stream_coverage
from core.maps.fix import fix_to
from core.maps.formats import MapReadError, read_bytes, read_path
from core.maps.model import ModelFacts, ranked_map

FIX = Path(__file__).resolve().parent / "fixtures" / "maps"
V = 49152
PWNED = "/tmp/speclens-maps-unsafe-pickle-ran"  # make_fixtures.py: what unsafe_pickle.pt's pickle would touch


@pytest.fixture(scope="module")
def smol():
    """SmolLM2-135M-Instruct's facts as load_facts reads them (test_facts_of_smollm2_are_what_the_fixtures_assume
    checks that on the real tokenizer), with the shipped FR-Spec table."""
    from core.decoding.freq import load_ranks
    from core.models import freq_table
    return ModelFacts("smollm2-135m-instruct", V, V, [2], [1, 2], [0, 1, 2],
                      {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}, load_ranks(freq_table("smollm2-135m-instruct"), V))


def findings(name, facts):
    return {(x.code, x.severity) for x in check_map(read_path(FIX / name), facts)}


BUG_CLASSES = [  # (fixture, finding code, severity)
    ("wrong_dtype.pt", "wrong_dtype", "error"),
    ("wrong_shape.pt", "wrong_shape", "error"),
    ("empty_map.json", "empty_map", "error"),
    ("ids_out_of_range.pt", "ids_out_of_range", "error"),
    ("vocab_size_mismatch.safetensors", "vocab_size_mismatch", "error"),
    ("duplicate_ids.json", "duplicate_ids", "error"),
    ("unsorted_ids.pt", "unsorted_ids", "warning"),
    ("d2t_all_zeros.safetensors", "d2t_all_zeros", "error"),
    ("d2t_off_by_one.safetensors", "d2t_off_by_one", "error"),
    ("d2t_absolute.safetensors", "d2t_absolute", "error"),
    ("d2t_t2d_mismatch.safetensors", "d2t_t2d_mismatch", "error"),
    ("t2d_missing.safetensors", "t2d_missing", "warning"),
    ("d2t_missing", "d2t_missing", "error"),
    ("head_rows_mismatch", "head_rows_mismatch", "error"),
    ("eos_missing.pt", "eos_missing", "error"),
    ("chat_tokens_missing.pt", "chat_tokens_missing", "warning"),
    ("special_tokens_missing.pt", "special_tokens_missing", "warning"),
    ("frequent_tokens_missing.pt", "frequent_tokens_missing", "warning"),
]


@pytest.mark.parametrize("name, code, severity", BUG_CLASSES, ids=[c for _, c, _ in BUG_CLASSES])
def test_the_doctor_names_the_bug_class_of_its_fixture(smol, name, code, severity):
    assert (code, severity) in findings(name, smol)


@pytest.mark.parametrize("name", ["unsorted_ids.pt", "t2d_missing.safetensors", "chat_tokens_missing.pt",
                                  "d2t_all_zeros.safetensors", "d2t_off_by_one.safetensors"])
def test_a_fixture_gets_no_finding_but_its_own(smol, name):
    assert {code for code, _ in findings(name, smol)} == {name.split(".")[0]}


def test_ids_past_the_tokenizer_are_padding_rows(smol):
    from dataclasses import replace
    assert ("ids_in_padding", "warning") in findings("ids_in_padding.pt", replace(smol, tokenizer_size=V - 1))
    assert findings("ids_in_padding.pt", smol) == set()


@pytest.mark.parametrize("name", ["clean.pt", "clean.d2t.safetensors"])
def test_a_clean_fixture_has_no_findings(smol, name):
    assert findings(name, smol) == set()


def test_maps_written_by_export_pass_clean(smol, tmp_path):
    from core.maps.export import ranking, token_map, write_map
    ids = token_map(ranking([-smol.ranks], V), 4096, smol.special_ids)
    for path in write_map(tmp_path / "m", ids, V):
        assert check_map(read_path(path), smol) == [], path.name


def test_an_unreadable_file_is_named(smol):
    with pytest.raises(MapReadError) as err:
        read_path(FIX / "unknown_format.bin")
    assert err.value.code == "unknown_format"


@pytest.mark.parametrize("how", ["path", "upload bytes"])
def test_a_pickle_with_code_in_it_is_refused_by_name_and_never_runs(how):
    if os.path.exists(PWNED):
        os.remove(PWNED)
    with pytest.raises(MapReadError) as err:
        read_path(FIX / "unsafe_pickle.pt") if how == "path" else read_bytes((FIX / "unsafe_pickle.pt").read_bytes(), "up.pt")
    assert err.value.code == "unsafe_pickle" and "posix.system" in str(err.value)
    assert not os.path.exists(PWNED)


def test_the_format_is_read_from_the_bytes_not_the_name():
    buf = io.BytesIO()
    torch.save(torch.arange(5), buf)
    assert read_bytes(buf.getvalue(), "looks.json").format == "pt ids"
    assert read_bytes(b"[3, 1, 2]", "looks.pt").ids.tolist() == [3, 1, 2]


# ---------------------------------------------------------------- --fix

def fixed(name, facts, tmp_path, suffix):
    out = tmp_path / f"out{suffix}"
    changes = fix_to(read_path(FIX / name), facts, out)
    return read_path(out), changes


def test_fix_dedups_and_sorts_an_id_list_and_says_so(smol, tmp_path):
    m, changes = fixed("duplicate_ids.json", smol, tmp_path, ".json")
    assert check_map(m, smol) == [] and torch.equal(m.ids, torch.unique(m.ids))
    assert any("removed 5 duplicate" in c for c in changes) and any("sorted" in c for c in changes)


def test_fix_adds_eos_and_names_it(smol, tmp_path):
    m, changes = fixed("eos_missing.pt", smol, tmp_path, ".pt")
    assert 2 in m.ids.tolist() and changes == ["added end-of-sequence tokens 2 '<|im_end|>'"]


@pytest.mark.parametrize("name", ["d2t_all_zeros.safetensors", "d2t_off_by_one.safetensors", "d2t_absolute.safetensors"])
def test_fix_recomputes_d2t_from_the_hot_ids(smol, tmp_path, name):
    m, changes = fixed(name, smol, tmp_path, ".safetensors")
    clean = load_file(FIX / "clean.d2t.safetensors")
    assert torch.equal(m.d2t, clean["d2t"]) and torch.equal(m.t2d, clean["t2d"]) and "d2t" in changes[0]


def test_fix_writes_d2t_and_t2d_of_an_id_list(smol, tmp_path):
    m, changes = fixed("clean.pt", smol, tmp_path, ".safetensors")
    assert check_map(m, smol) == [] and changes == ["converted pt ids to d2t"]


@pytest.mark.parametrize("name, why", [("ids_out_of_range.pt", "outside the model's vocabulary"),
                                       ("d2t_t2d_mismatch.safetensors", "disagree"),
                                       ("d2t_missing", "no d2t"), ("wrong_dtype.pt", "not integers")])
def test_fix_refuses_what_is_ambiguous_and_writes_nothing(smol, tmp_path, name, why):
    with pytest.raises(SpecError, match=why):
        fix_to(read_path(FIX / name), smol, tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


# ---------------------------------------------------------------- CLI

@pytest.fixture
def cli_facts(monkeypatch, smol):
    import core.maps.model
    monkeypatch.setattr(core.maps.model, "load_facts", lambda model_id: smol)


@pytest.mark.parametrize("files, status", [(["clean.pt"], 0), (["unsorted_ids.pt", "clean.pt"], 0),
                                           (["clean.pt", "eos_missing.pt"], 1), (["unsafe_pickle.pt"], 1)])
def test_check_exits_1_on_an_error_and_0_with_warnings_only(cli_facts, capsys, files, status):
    assert dispatch(["maps", "check", *[str(FIX / f) for f in files]]) == status


def test_check_prints_each_finding_with_its_code(cli_facts, capsys):
    dispatch(["maps", "check", str(FIX / "d2t_all_zeros.safetensors"), "--json"])
    (rep,) = json.loads(capsys.readouterr().out)
    assert rep["status"] == "error" and [x["code"] for x in rep["findings"]] == ["d2t_all_zeros"]


def test_check_fix_reports_every_change(cli_facts, capsys, tmp_path):
    dispatch(["maps", "check", str(FIX / "eos_missing.pt"), "--fix", str(tmp_path / "m.pt")])
    err = capsys.readouterr().err
    assert "fix: added end-of-sequence tokens 2" in err and f"fix: wrote {tmp_path / 'm.pt'}" in err


# ---------------------------------------------------------------- compare

def test_the_teacher_forced_stream_holds_what_the_window_saw():
    flags, sizes = stream_coverage([5, 6, 5, 7, 8], [[7], [], [], [], []], w_max=3)
    # stream: 5 7 | 6 | 5 | 7 | 8: x_2 = 5 is in the last 3 entries (5 7 6); x_4 = 8 never entered
    assert flags == [False, True, True, False] and sizes == [2, 3, 3, 3]


def test_a_checkpoint_without_d2t_is_measured_as_the_engine_serves_it(smol):
    ids, notes = served_ids(read_path(FIX / "d2t_missing"), smol)
    assert torch.equal(ids, torch.arange(256)) and "no d2t" in notes[0]


def test_a_zeroed_d2t_is_measured_as_the_id_prefix_it_serves_with_a_note(smol):
    ids, notes = served_ids(read_path(FIX / "d2t_all_zeros.safetensors"), smol)
    assert torch.equal(ids, torch.arange(256)) and notes[0].startswith("d2t all zeros")


def test_frspec_column_has_exactly_k_ids_with_the_specials(smol):
    ids = ranked_map(smol.ranks, 300, smol.special_ids)
    assert len(ids) == 300 and {0, 1, 2} <= set(ids.tolist()) and torch.equal(ids, torch.unique(ids))


# ---------------------------------------------------------------- the real model

@pytest.mark.model
def test_facts_of_smollm2_are_what_the_fixtures_assume(smol):
    from core.maps.model import load_facts
    f = load_facts("smollm2-135m-instruct")
    assert (f.vocab_size, f.tokenizer_size, f.eos_ids, f.chat_ids, f.special_ids) == (V, V, [2], [1, 2], [0, 1, 2])
    assert f.tokens == smol.tokens


@pytest.mark.model
def test_a_map_from_python_m_core_export_passes_clean(capsys, tmp_path):
    assert dispatch(["export", "--source", "freq", "--size", "1024", "--no-report", "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    files = [str(tmp_path / f"m{s}") for s in (".pt", ".json", ".d2t.safetensors")]
    assert dispatch(["maps", "check", *files, "--json"]) == 0
    assert all(r["findings"] == [] for r in json.loads(capsys.readouterr().out))


@pytest.mark.model
def test_the_static_map_head_is_lossless_and_a_map_without_the_answer_s_tokens_accepts_less(default_pipeline):
    from core.maps.accept import run_static, tau, tokens
    from core.maps.accept import engine_config
    prompt = "Write a Python function that returns the sum of the squares of a list of numbers."
    cfg = lambda m: engine_config("smollm2-135m-instruct", m, 32)
    ar = tokens(list(default_pipeline.run(prompt, cfg("ar"))))
    pid = default_pipeline.prompt_ids(prompt)
    full = run_static(default_pipeline, pid, cfg("frspec"), torch.arange(V))
    tiny = run_static(default_pipeline, pid, cfg("frspec"), torch.tensor([0, 1, 2]))
    assert tokens(full) == ar and tokens(tiny) == ar
    assert tau([tiny]) < tau([full])


@pytest.mark.model
def test_compare_on_the_target_s_outputs_counts_its_greedy_tokens_per_category(capsys):
    assert dispatch(["maps", "compare", str(FIX / "clean.pt"), "--per-category", "1", "--max-new-tokens", "8",
                     "--threads", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["tokens_are"].startswith("the target's greedy outputs")
    assert [r["category"] for r in res["rows"]] == ["conv", "mt", "summ", "qa", "math", "rag", "code", "all"]
    assert res["rows"][-1]["tokens"] == sum(r["tokens"] for r in res["rows"][:-1]) > 0
    assert set(res["rows"][-1]["coverage"]) == {"clean.pt (256)", "FR-Spec shipped (256)", "NanoSpec I_t"}


@pytest.mark.model
def test_compare_on_prompt_tokens_says_so_and_loads_no_weights(monkeypatch, capsys):
    import core.models
    monkeypatch.setattr(core.models, "load_model", lambda *a, **k: pytest.fail("loaded weights"))
    monkeypatch.setattr("core.pipeline.Pipeline.load", lambda *a, **k: pytest.fail("loaded the pipeline"))
    assert dispatch(["maps", "compare", str(FIX / "clean.pt"), "--prompt-tokens", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["tokens_are"].startswith("the tokenized prompts, not the target's outputs")
    assert res["rows"][-1]["coverage"]["clean.pt (256)"] == res["rows"][-1]["coverage"]["FR-Spec shipped (256)"]
