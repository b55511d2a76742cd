"""llama.cpp as a benchmark peer: its command lines, the parsers of its real output (fixtures captured from the
built tools), the not-built message, and one real run of the built llama-completion on SmolLM2."""
import json
from pathlib import Path

import pytest

from core.errors import SpecError
from bench.llamacpp import cli as llamacpp
from bench.llamacpp import build as llamacpp_build, compare as llamacpp_bench, run as llamacpp_run

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llamacpp"


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """A cache root whose llama.cpp bin dir holds an empty file per tool."""
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    bin_dir = llamacpp_build.home() / "bin"
    bin_dir.mkdir(parents=True)
    for tool in llamacpp_build.TOOLS:
        (bin_dir / tool).touch()
    return bin_dir


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_missing_build_names_the_build_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    with pytest.raises(SpecError, match=r"llama.cpp is not built: run python -m bench llamacpp build"):
        llamacpp_build.binary("llama-completion")


def test_the_bench_command_without_a_build_exits_2_with_the_build_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    assert llamacpp.main(["bench", "--model", "smollm2-135m-instruct"]) == 2
    assert "error: llama.cpp is not built: run python -m bench llamacpp build" in capsys.readouterr().err


def test_an_unknown_tool_is_refused_by_name(fake_build):
    with pytest.raises(SpecError, match="unknown llama.cpp tool 'llama-server'"):
        llamacpp_build.binary("llama-server")


def test_bench_variants_are_dropped_with_the_message_when_not_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    assert llamacpp_bench.usable(["ar", "nanospec", "llamacpp", "llamacpp-spec"]) == ["ar", "nanospec"]
    assert "skipping llamacpp, llamacpp-spec: llama.cpp is not built" in capsys.readouterr().err


def test_completion_args_pass_the_templated_prompt_verbatim_greedy_and_raw(fake_build):
    prompt = "<|im_start|>user\nprint('a\\nb')<|im_end|>\n<|im_start|>assistant\n"
    args = llamacpp_run.completion_args(Path("m.gguf"), prompt, 64, 2)
    assert args[0] == str(fake_build / "llama-completion")
    assert args[args.index("-p") + 1] == prompt  # one argument, newlines and backslashes untouched
    for flag, value in (("-n", "64"), ("-t", "2"), ("-tb", "2"), ("--temp", "0"), ("-m", "m.gguf")):
        assert args[args.index(flag) + 1] == value
    assert {"--no-escape", "-no-cnv", "--no-display-prompt", "--verbose-prompt"} <= set(args)


def test_speculative_args_draft_with_the_draft_gguf_up_to_the_draft_length(fake_build):
    args = llamacpp_run.speculative_args(Path("t.gguf"), Path("d.gguf"), "p", 64, 2, 4)
    for flag, value in (("-m", "t.gguf"), ("-md", "d.gguf"), ("--spec-type", "draft-simple"),
                        ("--spec-draft-n-max", "4"), ("-td", "2"), ("--temp", "0"), ("-n", "64")):
        assert args[args.index(flag) + 1] == value


def test_a_peer_variant_name_gives_its_draft_length():
    assert [llamacpp_bench.peer_variant(v) for v in ("llamacpp", "llamacpp-spec", "llamacpp-spec8", "llamacpp-x")] \
        == [0, -1, 8, None]


def test_completion_output_parses_to_the_generation_phase_and_the_prompt_ids():
    run = llamacpp_run.parse_completion(read("completion.stdout"), read("completion.stderr"))
    assert (run.text, run.new_tokens, run.decode_tokens) == ("1. Red: The most obvious colour", 8, 7)
    assert (run.decode_s, run.prompt_s) == (0.73623, 4.34891)  # eval / prompt eval ms as llama.cpp printed them
    assert len(run.prompt_ids) == 34 and run.prompt_ids[:3] == [1, 9690, 198] and run.prompt_ids[-1] == 198


def test_completion_text_stops_before_the_end_of_text_marker():
    stdout = "I'm ready to assist you. [end of text]\n\n\n"  # captured at an EOS
    run = llamacpp_run.parse_completion(stdout, read("completion.stderr"))
    assert run.text == "I'm ready to assist you."


def test_speculative_output_parses_to_the_decoded_tokens_and_acceptance():
    prompt = read("speculative.prompt")
    run = llamacpp_run.parse_speculative(read("speculative.stdout"), read("speculative.stderr"), prompt)
    assert (run.new_tokens, run.decode_tokens, run.drafted, run.accepted) == (20, 20, 20, 15)
    assert run.text.startswith("```python\ndef reverse_string(s):") and run.text.endswith("Args")
    assert (run.decode_s, run.prompt_s) == (36.434, 5.265)


def test_llama_bench_json_parses_to_tg_tokens_per_second():
    assert llamacpp_run.parse_bench(read("bench.json")) == {"tg64": 3.711954}


def test_llama_bench_at_a_depth_parses_to_its_own_key():
    rows = json.loads(read("bench.json"))
    rows[0]["n_depth"] = 105
    assert llamacpp_run.parse_bench(json.dumps(rows)) == {"tg64@d105": 3.711954}


def test_llama_bench_runs_after_the_depth_asked_for(monkeypatch):
    monkeypatch.setattr(llamacpp_run, "binary", lambda name: name)
    assert llamacpp_run.bench_args(Path("m.gguf"), 64, 2, 3, depth=105)[-4:] == ["-d", "105", "-ub", "1"]
    assert "-d" not in llamacpp_run.bench_args(Path("m.gguf"), 64, 2, 3)


def test_output_without_timings_is_a_named_error():
    with pytest.raises(SpecError, match="llama-completion printed no timings"):
        llamacpp_run.parse_completion("some text", "no perf lines here")


class CharTokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def test_a_tool_that_crashes_with_repacked_weights_is_rerun_once_without_and_says_so(tmp_path):
    tool = tmp_path / "tool"
    tool.write_text('#!/bin/sh\ncase "$*" in *--no-repack*) echo generated; exit 0;; esac\nkill -SEGV $$\n')
    tool.chmod(0o755)
    out, _, repacked = llamacpp_run.with_fallback([str(tool), "-m", "x.gguf"])
    assert (out, repacked) == ("generated\n", False)


def test_a_tool_that_fails_without_a_signal_is_not_rerun(tmp_path):
    tool = tmp_path / "tool"
    tool.write_text('#!/bin/sh\necho "bad model" >&2\nexit 1\n')
    tool.chmod(0o755)
    with pytest.raises(SpecError, match="tool exit 1: bad model"):
        llamacpp_run.with_fallback([str(tool)])


def test_agreement_counts_our_leading_tokens_that_the_peer_text_repeats():
    ours = [ord(c) for c in "hello world"]
    assert llamacpp_run.agreement(CharTokenizer(), ours, "hello there") == 6
    assert llamacpp_run.agreement(CharTokenizer(), ours, "hello world!") == len(ours)


def test_the_gguf_bound_counts_the_embeddings_only_when_they_are_the_head(tmp_path):
    import numpy as np
    from gguf import GGUFWriter
    for with_head, want in ((False, 64 * 4 + 16 * 4), (True, 16 * 4 + 32 * 4)):
        path = tmp_path / f"m{with_head}.gguf"
        w = GGUFWriter(str(path), "llama")
        w.add_tensor("token_embd.weight", np.zeros((8, 8), np.float32))
        w.add_tensor("blk.0.attn_norm.weight", np.zeros(16, np.float32))
        if with_head:
            w.add_tensor("output.weight", np.zeros((4, 8), np.float32))
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
        assert llamacpp_bench.gguf_step_bytes(path) == want


def test_the_peer_bound_sets_the_gguf_floor_beside_llamas_measured_step(tmp_path):
    import numpy as np
    from gguf import GGUFWriter
    path = tmp_path / "m.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.zeros((250, 1000), np.float32))  # the head too: 1 MB a token
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    rows = [{"variant": "llamacpp", "decode_tokens": 10, "decode_s": 0.04}, {"variant": "ar", "decode_tokens": 1,
                                                                              "decode_s": 9.0}]
    bound = llamacpp_bench.peer_bound(rows, path, gbs=1.0)  # 1 MB at 1 GB/s: 1 ms floor, 4 ms measured
    assert bound == {"llamacpp_gb": 0.001, "llamacpp_floor_ms": 1.0, "llamacpp_decode_ms": 4.0,
                     "llamacpp_of_floor": 0.25}


def test_a_gguf_that_asks_for_bos_has_llama_cpp_add_it_and_one_that_does_not_leaves_it_to_the_text(tmp_path):
    import numpy as np
    from gguf import GGUFWriter
    for flag in (True, False, None):
        path = tmp_path / f"m{flag}.gguf"
        w = GGUFWriter(str(path), "gemma3")
        if flag is not None:
            w.add_add_bos_token(flag)
        w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
        assert llamacpp_bench.adds_bos(path) is bool(flag)


def smollm2_ready() -> bool:
    from core.models import converted_dir, source_gguf
    return llamacpp_build.built() and source_gguf("smollm2-135m-instruct") is not None \
        and (converted_dir("smollm2-135m-instruct") / "config.json").is_file()


@pytest.mark.skipif(not smollm2_ready(), reason="llama.cpp is not built (python -m bench llamacpp build) "
                                                "or SmolLM2 is not in the cache")
def test_the_built_completion_tool_reads_our_templated_prompt_as_our_ids_and_decodes_n_tokens():
    from core.models import chat_prompt_ids, load_tokenizer, source_gguf
    tok = load_tokenizer("smollm2-135m-instruct")
    ids = chat_prompt_ids(tok, "Name three colours.")
    run = llamacpp_run.complete(source_gguf("smollm2-135m-instruct"), tok.decode(ids), 6, 2)
    assert run.prompt_ids == ids
    assert run.new_tokens == 6 and run.text.strip()


def test_the_avx2_cap_takes_the_avx2_only_build_and_names_its_build_command(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECLENS_CPU_ISA", "avx2")
    assert llamacpp_build.peer_flavor() == "avx2"
    with pytest.raises(SpecError, match=r"llama.cpp \(avx2 build\) is not built: .* build --flavor avx2"):
        llamacpp_build.binary("llama-completion")
    bin_dir = llamacpp_build.home(flavor="avx2") / "bin"
    bin_dir.mkdir(parents=True)
    for tool in llamacpp_build.TOOLS:
        (bin_dir / tool).touch()
    assert llamacpp_build.binary("llama-completion") == bin_dir / "llama-completion"
    monkeypatch.setenv("SPECLENS_CPU_ISA", "avx512")
    assert llamacpp_build.peer_flavor() == "avx512"
    monkeypatch.setenv("SPECLENS_CPU_ISA", "amx")
    assert llamacpp_build.peer_flavor() == "native"


def test_the_avx512_build_has_avx512_and_its_int8_dots_but_no_amx():
    flags = llamacpp_build.FLAVORS["avx512"]
    assert "-DGGML_NATIVE=OFF" in flags
    for feature in ("AVX512", "AVX512_VNNI", "AVX512_BF16"):
        assert f"-DGGML_{feature}=ON" in flags
    for feature in ("AMX_TILE", "AMX_INT8", "AMX_BF16"):
        assert f"-DGGML_{feature}=OFF" in flags


def test_the_avx2_build_turns_off_every_feature_above_avx2():
    flags = llamacpp_build.FLAVORS["avx2"]
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
    for feature in ("AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI", "AMX_INT8", "AMX_BF16"):
        assert f"-DGGML_{feature}=OFF" in flags


def test_the_passes_command_without_a_build_exits_2_with_the_build_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    assert llamacpp.main(["passes", "--model", "smollm2-135m-instruct"]) == 2
    assert "error: llama.cpp is not built: run python -m bench llamacpp build" in capsys.readouterr().err


def test_a_peer_pass_is_llama_benchs_batch_of_n_tokens_after_the_depth_in_whole_batches(fake_build):
    args = llamacpp_run.pass_args(Path("m.gguf"), 9, 2, 5, depth=64)
    assert args[args.index("-p") + 1] == "9" and args[args.index("-n") + 1] == "0"
    assert args[args.index("-d") + 1] == "64" and "-ub" not in args


def test_peer_passes_read_ms_per_pass_from_llama_bench_and_name_a_crashed_batch(fake_build, monkeypatch):
    from bench.llamacpp import passes as llamacpp_passes
    (fake_build / "llama-bench").write_text(  # tok/s of a 1-token batch: 25; of more: 40; a batch of 16 crashes
        '#!/bin/sh\nn=$(echo "$@" | sed "s/.*-p \\([0-9]*\\).*/\\1/")\n[ "$n" = 16 ] && kill -SEGV $$\n'
        'ts=40; [ "$n" = 1 ] && ts=25\n'
        'echo "[{\\"n_prompt\\": $n, \\"n_gen\\": 0, \\"n_depth\\": 64, \\"avg_ts\\": $ts}]"\n')
    (fake_build / "llama-bench").chmod(0o755)
    monkeypatch.setattr(llamacpp_passes, "gguf_of", lambda model: Path("m.gguf"))
    out = llamacpp_passes.peer_passes("m", [1, 4, 16], 64, 2, 1)
    assert out[1] == pytest.approx(40.0) and out[4] == pytest.approx(100.0)
    assert out[16].startswith("crashed (llama-bench exit -11")
    assert llamacpp_passes.cell(out[4], out[1]) == ("100.0", "2.50") and llamacpp_passes.cell(out[16], out[1])[1] == ""
