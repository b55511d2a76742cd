"""Results as data: README.md's results table is the rendering of results/results.jsonl (`python -m bench
render-readme`), every row carries the fields a measurement needs, and a recorded row lands in the table."""
import json
import re

import pytest

from bench import results
from core.results import CLASSES, RESULTS, cpu_class, like_this_cpu, read_rows, this_cpu
from core.results import cpu_model as results_cpu_model

ROWS = read_rows()


def test_the_readme_results_table_is_the_rendering_of_the_results_file():
    text = results.README.read_text()
    assert text.count(results.START) == 1 and text.count(results.END) == 1
    assert results.rendered(text, ROWS) == text, "README.md's results table is stale: run python -m bench render-readme"


@pytest.mark.parametrize("i", range(len(ROWS)))
def test_every_results_row_has_the_required_fields(i):
    row = ROWS[i]
    assert [f for f in results.REQUIRED if f not in row] == []
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", row["date"]) and row["kind"] in results.KINDS
    assert row["commit"] and isinstance(row["cpu_features"], list) and row["cpu_class"] in CLASSES
    assert row["cpu_class"] == cpu_class(row["cpu_features"], row.get("isa_cap", ""))
    assert isinstance(row["threads"], int) and row["command"].strip() and row["figures"]
    need = {"plain": ("ours_tok_s", "llamacpp_tok_s"), "speculation": ("best_spec_x", "best_spec_label")}
    assert [f for f in need.get(row["kind"], ()) if f not in row["figures"]] == []
    assert not row.get("log") or (results.ROOT / row["log"]).is_file()


def test_the_results_file_holds_the_readme_figures():
    plain = {(r["model"], r["cpu_class"]): r["figures"] for r in ROWS if r["kind"] == "plain"}
    assert plain[("smollm2-135m-instruct", "amx")] == {"ours_tok_s": 178.6, "llamacpp_tok_s": 154.5}
    assert len(ROWS) >= 15 and RESULTS.name == "results.jsonl"


def test_the_cpu_class_is_the_best_the_kernels_run_under_the_cap():
    xeon = ["avx2", "fma", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"]
    assert cpu_class(xeon) == "amx" and cpu_class(xeon, "avx512") == "avx512" and cpu_class(xeon, "avx2") == "avx2"
    assert cpu_class(["avx2", "fma"], "avx512") == "avx2" and cpu_class(["sse4_2"]) == "other"
    assert cpu_class(xeon, "none") == "other"


def test_a_recorded_row_lands_in_the_table_and_among_the_rows_of_cpus_like_this_one(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    row = results.append_row("plain", "tiny-model", {"ours_tok_s": 30.0, "llamacpp_tok_s": 20.0}, "python -m bench x",
                             argv=["--threads", "2"], threads=2, path=path)
    assert row["command"] == "python -m bench x --threads 2" and row["cpu_class"] == this_cpu()["cpu_class"]
    rows = read_rows(path)
    assert rows[-1] == row and "| tiny-model | " in results.table(rows) and "**1.50×** (30.0 / 20.0 tok/s)" in results.table(rows)
    assert row in like_this_cpu(path) and all(r["cpu_class"] == row["cpu_class"] for r in like_this_cpu(path))
    readme = f"intro\n{results.START}\nold\n{results.END}\nrest\n"
    assert results.rendered(readme, rows) == f"intro\n{results.START}\n{results.table(rows)}\n{results.END}\nrest\n"


def test_a_recorded_row_is_named_by_its_target_and_draft(tmp_path):
    path = tmp_path / "results.jsonl"
    spec = results.append_row("speculation", "qwen2.5-coder-0.5b-instruct", {"best_spec_x": 1.1, "best_spec_label":
                              "nanospec"}, "python -m bench pair", threads=2, draft="eagle", path=path)
    plain = results.append_row("plain", "qwen2.5-coder-0.5b-instruct", {"ours_tok_s": 3.0, "llamacpp_tok_s": 2.0},
                               "python -m bench llamacpp bench", threads=2, path=path)
    assert spec["model_label"] == "Qwen2.5-Coder-0.5B + EAGLE" and plain["model_label"] == "Qwen2.5-Coder-0.5B"
    assert "| Qwen2.5-Coder-0.5B + EAGLE | " in results.table(read_rows(path))  # the speculation row names the group
    assert results.model_label("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct") == "Qwen2.5-Coder-1.5B ← 0.5B"


def test_a_bare_amd_epyc_is_named_by_its_core_generation():
    assert results_cpu_model("AMD EPYC", "25", ["avx2", "avx512f"]) == "AMD EPYC Zen 4"
    assert results_cpu_model("AMD EPYC", "25", ["avx2"]) == "AMD EPYC Zen 3"
    assert results_cpu_model("AMD EPYC", "26", ["avx2", "avx512f"]) == "AMD EPYC Zen 5"
    assert results_cpu_model("Intel Xeon", "6", ["avx2"]) == "Intel Xeon"
