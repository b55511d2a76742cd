import json

import pytest
import torch

from core.decoding.freq import frspec_ids, load_ranks, load_table, special_ids
from core.errors import SpecError
from core.train import freq
from core.train.freq import count_generations, count_tokens, read_texts, save_table
from core.models import freq_table, model_alias
from tools.tiny import tiny_model, tiny_tokenizer

TEMPLATE = "{% for m in messages %}<s> {{ m['content'] }} </s> {% endfor %}{% if add_generation_prompt %}<s>{% endif %}"


def test_count_tokens_counts_every_occurrence_without_specials():
    counts = count_tokens(tiny_tokenizer(16), ["w3 w4 w3", "w3 w15"])
    assert counts.tolist() == [0, 0, 0, 3, 1] + [0] * 10 + [1]


def test_ranks_put_the_most_frequent_first_and_break_ties_by_id(tmp_path):
    save_table(tmp_path / "t.safetensors", torch.tensor([5, 0, 7, 5, 0]), {})
    ranks = load_ranks(tmp_path / "t.safetensors", 5)
    assert ranks.tolist() == [1, 3, 0, 2, 4]   # by frequency 2, 0, 3; then unseen 1, 4 by id


def test_unseen_tokens_rank_after_every_seen_one(tmp_path):
    save_table(tmp_path / "t.safetensors", torch.tensor([0, 0, 1]), {})
    ranks = load_ranks(tmp_path / "t.safetensors", 6)   # ids 3-5 are beyond the table: unseen
    assert ranks.tolist() == [1, 2, 0, 3, 4, 5]


def test_a_table_with_counts_beyond_the_model_vocab_is_rejected(tmp_path):
    save_table(tmp_path / "t.safetensors", torch.tensor([1, 2, 3, 4]), {})
    with pytest.raises(SpecError, match="4 tokens, the model only 3"):
        load_ranks(tmp_path / "t.safetensors", 3)


def test_save_table_round_trips_counts_and_meta_and_leaves_no_temp_file(tmp_path):
    save_table(tmp_path / "t.safetensors", torch.tensor([2, 0, 9]), {"model": "tiny", "corpus": ["a.txt"]})
    counts, meta = load_table(tmp_path / "t.safetensors")
    assert counts.tolist() == [2, 0, 9] and meta == {"model": "tiny", "corpus": ["a.txt"]}
    assert [p.name for p in tmp_path.iterdir()] == ["t.safetensors"]


def test_frspec_ids_are_the_top_k_plus_the_always_included_ids():
    ranks = torch.tensor([3, 0, 5, 1, 2, 4])
    assert frspec_ids(ranks, 2, always=[5]).tolist() == [1, 3, 5]


def test_special_ids_include_eos_and_the_chat_template_tokens():
    tokenizer = tiny_tokenizer(chat_template=TEMPLATE)
    assert {1, 2} <= set(special_ids(tokenizer))


def test_frspec_vocabulary_keeps_specials_even_when_they_are_rare(tmp_path):
    tokenizer = tiny_tokenizer(64, chat_template=TEMPLATE)
    save_table(tmp_path / "t.safetensors", count_tokens(tokenizer, ["w10 w11 w12 w10"]), {})
    ids = frspec_ids(load_ranks(tmp_path / "t.safetensors", 64), 3, always=special_ids(tokenizer))
    assert set(ids.tolist()) == {10, 11, 12} | set(special_ids(tokenizer))


def test_jsonl_rows_join_their_text_fields_including_turns(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"prompt": "p", "response": "r", "source": "ignored"}, {"question": "q", "turns": ["t1", "t2"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert list(read_texts(path)) == ["p\nr", "q\nt1\nt2"]


def test_python_files_are_one_text_and_txt_files_split_into_paragraphs(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n\n    return 1\n")
    (tmp_path / "a.txt").write_text("one\n\ntwo\n")
    assert list(read_texts(tmp_path / "m.py")) == ["def f():\n\n    return 1\n"]
    assert list(read_texts(tmp_path / "a.txt")) == ["one", "two\n"]


def test_a_corpus_row_that_is_not_json_names_file_and_line(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "ok"}\n{oops\n')
    with pytest.raises(SpecError, match=r"c.jsonl:2: not valid JSON"):
        list(read_texts(tmp_path / "c.jsonl"))


def greedy(model, ids, n, eos):
    ids = list(ids)
    for _ in range(n):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        if ids[-1] == eos:
            break
    return ids


@torch.no_grad()
def test_count_generations_counts_the_greedy_continuations_only():
    model, tokenizer = tiny_model(), tiny_tokenizer()
    counts = count_generations(model, tokenizer, ["w5 w6", "w7"], max_new_tokens=4)
    new = greedy(model, [5, 6], 4, eos=2)[2:] + greedy(model, [7], 4, eos=2)[1:]
    assert counts.tolist() == torch.bincount(torch.tensor(new), minlength=512).tolist()


def test_cli_builds_a_table_from_corpus_files(tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_model().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    (tmp_path / "c.txt").write_text("w3 w3 w4\n")
    out = tmp_path / "t.safetensors"
    assert freq.main(["--corpus", str(tmp_path / "c.txt"), "--model", str(model_dir), "--out", str(out)]) == 0
    counts, meta = load_table(out)
    assert counts[3] == 2 and counts[4] == 1 and meta["corpus"] == ["c.txt"] and meta["vocab_size"] == 512


def test_cli_reports_a_missing_corpus_file_as_an_error(tmp_path, capsys):
    code = freq.main(["--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "t.safetensors")])
    assert code == 2 and "error: " in capsys.readouterr().err


def test_an_unknown_table_name_is_a_spec_error():
    with pytest.raises(SpecError, match="no frequency table 'gpt2'"):
        freq_table("gpt2")


@pytest.mark.parametrize("alias,vocab", [("smollm2-135m-instruct", 49152), ("gemma-3-270m", 262144),
                                         ("qwen2.5-coder-1.5b-instruct", 151936), ("qwen2.5-coder-0.5b-instruct", 151936)])
def test_shipped_tables_load_by_model_alias(alias, vocab):
    """Aliases that share a tokenizer (the Qwen2.5-Coder pair) share one table, counted with that tokenizer."""
    ranks = load_ranks(freq_table(alias), vocab)
    assert sorted(ranks.tolist()) == list(range(vocab))
    _, meta = load_table(freq_table(alias))
    assert freq_table(model_alias(meta["model"])) == freq_table(alias)
    assert meta["corpus_tokens"] > 1_000_000
