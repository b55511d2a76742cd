import json
from collections import Counter

import pytest

from core.errors import SpecError
from core.prompts import CATEGORIES, DEFAULT_PROMPTS, Prompt, example_prompts, load_prompts

SPEC_BENCH = [
    {"question_id": 81, "category": "writing", "turns": ["Compose a travel blog post about Hawaii.", "Rewrite it."]},
    {"question_id": 111, "category": "math", "turns": ["The vertices of a triangle are (0, 0), (-1, 1), (3, 3)."]},
    {"question_id": 161, "category": "translation", "turns": ["Translate German to English: Guten Morgen."]},
    {"question_id": 241, "category": "summarization", "turns": ["Summarize: The council met on Monday."]},
    {"question_id": 321, "category": "qa", "turns": ["who sang the song dancing queen"]},
    {"question_id": 401, "category": "math_reasoning", "turns": ["Tom has 3 apples and buys 2 more. How many?"]},
    {"question_id": 481, "category": "rag", "turns": ["Passage: ... Question: when did it open?"]},
]
HUMAN_EVAL = {"task_id": "HumanEval/0", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n",
              "canonical_solution": "    return a + b\n", "test": "assert add(1, 2) == 3", "entry_point": "add"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_spec_bench_categories_map_to_ours(tmp_path):
    prompts = load_prompts(write_jsonl(tmp_path / "question.jsonl", SPEC_BENCH))
    assert [p.category for p in prompts] == ["conv", "conv", "mt", "summ", "qa", "math", "rag"]


def test_a_multi_turn_row_is_its_first_turn(tmp_path):
    prompts = load_prompts(write_jsonl(tmp_path / "q.jsonl", SPEC_BENCH[:1]))
    assert prompts == [Prompt("81", "conv", "Compose a travel blog post about Hawaii.")]


def test_human_eval_rows_are_code_prompts(tmp_path):
    prompts = load_prompts(write_jsonl(tmp_path / "HumanEval.jsonl", [HUMAN_EVAL]))
    assert prompts == [Prompt("HumanEval/0", "code", HUMAN_EVAL["prompt"])]


def test_one_file_may_mix_spec_bench_and_human_eval_rows(tmp_path):
    prompts = load_prompts(write_jsonl(tmp_path / "mixed.jsonl", [SPEC_BENCH[2], HUMAN_EVAL]))
    assert [p.category for p in prompts] == ["mt", "code"]


def test_our_own_rows_keep_their_category_names(tmp_path):
    row = {"question_id": "math-01", "category": "math", "turns": ["What is 2 + 2?"]}
    assert load_prompts(write_jsonl(tmp_path / "ours.jsonl", [row]))[0].category == "math"


def test_several_files_load_in_order_then_filter_then_limit(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", SPEC_BENCH)
    b = write_jsonl(tmp_path / "b.jsonl", [HUMAN_EVAL])
    assert [p.id for p in load_prompts([a, b], categories=["conv", "code"])] == ["81", "111", "HumanEval/0"]
    assert [p.id for p in load_prompts([a, b], limit=2)] == ["81", "111"]


def test_an_unknown_category_filter_is_rejected():
    with pytest.raises(SpecError, match="unknown categories"):
        load_prompts(DEFAULT_PROMPTS, categories=["poetry"])


def test_a_row_missing_fields_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [SPEC_BENCH[0], {"question_id": 5, "turns": ["no category"]}])
    with pytest.raises(SpecError, match=r"bad.jsonl:2: need fields"):
        load_prompts(path)


def test_turns_that_are_not_a_list_of_strings_are_rejected(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question_id": 1, "category": "qa", "turns": "just a string"}])
    with pytest.raises(SpecError, match=r"bad.jsonl:1: 'turns' must be"):
        load_prompts(path)


def test_an_unknown_row_category_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"question_id": 1, "category": "poetry", "turns": ["x"]}])
    with pytest.raises(SpecError, match=r"bad.jsonl:1: unknown category 'poetry'"):
        load_prompts(path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(SPEC_BENCH[0]).encode() + b"\n" + '{"task_id": "x", "prompt": "café"}'.encode("latin-1"))
    with pytest.raises(SpecError, match=r"latin1.jsonl:2: invalid UTF-8"):
        load_prompts(path)


def test_an_empty_file_is_rejected(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(SpecError, match=r"empty.jsonl: no prompts"):
        load_prompts(tmp_path / "empty.jsonl")


def test_a_huge_line_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "huge.jsonl", [{"task_id": "x", "prompt": "a" * 100_001}])
    with pytest.raises(SpecError, match=r"huge.jsonl:1: line longer than 100000"):
        load_prompts(path)


def test_a_line_that_is_not_json_names_file_and_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps(HUMAN_EVAL) + "\nquestion_id: 1\n")
    with pytest.raises(SpecError, match=r"bad.jsonl:2: not valid JSON"):
        load_prompts(tmp_path / "bad.jsonl")


def test_a_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="nope.jsonl: cannot read"):
        load_prompts(tmp_path / "nope.jsonl")


def test_shipped_prompt_set_has_at_least_six_prompts_per_category():
    counts = Counter(p.category for p in load_prompts(DEFAULT_PROMPTS))
    assert set(counts) == set(CATEGORIES) and min(counts.values()) >= 6


def test_shipped_prompt_ids_are_unique_and_texts_non_trivial():
    prompts = load_prompts(DEFAULT_PROMPTS)
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(len(p.text) >= 30 for p in prompts)


def test_shipped_summarization_and_rag_prompts_carry_their_passages():
    prompts = load_prompts(DEFAULT_PROMPTS, categories=["summ", "rag"])
    assert all(len(p.text) > 400 for p in prompts)


def test_example_prompts_are_one_per_category_in_order():
    assert [p.category for p in example_prompts()] == list(CATEGORIES)
