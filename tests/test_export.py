"""Export of static draft vocabularies (SGLang / vLLM / EAGLE-3) and of the EAGLE head in the official layout."""
import json

import pytest
import torch
from safetensors.torch import load_file

from core.cli import dispatch
from core.decoding.eagle import EagleConfig, EagleDrafter, EagleHead, init_from_target
from core.decoding.eagle_io import load_official, save_official
from core.errors import SpecError
from core.maps.export import (candidate_counts, check_disjoint, d2t_t2d, dynamic_coverage, emitted_counts, ranking,
                         token_map, write_map)
from tools.tiny import tiny_model
from core.prompts import Prompt
from core.trace.record import StepRecord

V, EOS = 512, 2


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def exported(tmp_path, k=100, always=(EOS, 7, 500)):
    counts = torch.randint(0, 50, (V,), generator=torch.Generator().manual_seed(0))
    ids = token_map(ranking([counts], V), k, always)
    return write_map(tmp_path / "map", ids, V), ids


def test_pt_map_is_sorted_unique_in_range_int64_with_eos(tmp_path):
    (pt, _, _), ids = exported(tmp_path)
    loaded = torch.load(pt, weights_only=True)
    assert loaded.dtype == torch.int64 and loaded.dim() == 1 and len(loaded) == 100
    assert torch.equal(loaded, torch.unique(loaded)) and torch.equal(loaded, ids)  # unique() sorts
    assert loaded.min() >= 0 and loaded.max() < V
    assert {EOS, 7, 500} <= set(loaded.tolist())


def test_json_map_equals_pt_map(tmp_path):
    (pt, js, _), _ = exported(tmp_path)
    assert json.loads(js.read_text()) == torch.load(pt, weights_only=True).tolist()


def test_d2t_and_t2d_map_back_to_the_same_ids(tmp_path):
    (pt, _, d2t_path), _ = exported(tmp_path)
    ids = torch.load(pt, weights_only=True)
    sd = load_file(d2t_path)
    d2t, t2d = sd["d2t"], sd["t2d"]
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool and t2d.shape == (V,)
    assert torch.equal(torch.arange(len(d2t)) + d2t, ids)  # EAGLE-3: target = draft index + d2t[index]
    assert torch.equal(t2d.nonzero().flatten(), ids)


def test_d2t_of_a_contiguous_prefix_is_zero():
    d2t, t2d = d2t_t2d(torch.arange(10), 20)
    assert not d2t.any() and t2d.sum() == 10


def test_ranking_sorts_by_keys_in_order_then_by_id():
    first = torch.tensor([0, 5, 5, 0, 1])
    second = torch.tensor([9, 1, 2, 0, 0])
    assert ranking([first, second], 5).tolist() == [2, 1, 4, 0, 3]
    assert ranking([], 3).tolist() == [0, 1, 2]


def test_map_keeps_the_specials_and_has_exactly_k_ids():
    order = torch.arange(V)
    ids = token_map(order, 10, [EOS, 400])
    assert len(ids) == 10 and {EOS, 400} <= set(ids.tolist())
    assert ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 400]


@pytest.mark.parametrize("k, always, needle", [(0, [], "--size"), (V + 1, [], "--size"), (1, [1, 2], "special"),
                                                (5, [V], "special")])
def test_bad_map_requests_are_clear_errors(k, always, needle):
    with pytest.raises(SpecError, match=needle):
        token_map(torch.arange(V), k, always)


def step(emitted, in_vocab, appended):
    return StepRecord(step=1, kind="step", emitted=emitted, emitted_in_vocab=in_vocab,
                      stream={"entered": [], "left": [], "size_s": 0, "active": 0, "appended": appended})


def test_nanospec_counts_read_emitted_tokens_and_target_candidates_from_the_trace():
    runs = [[step([5, 6], [True, False], [["draft", [9, 9]], ["verify", [5, 7, 7]], ["prompt", [8]]]),
             step([5], [True], [["prefill", [7]]])]]
    assert emitted_counts(runs, 10).tolist() == [0, 0, 0, 0, 0, 2, 1, 0, 0, 0]
    assert candidate_counts(runs, 10).tolist() == [0, 0, 0, 0, 0, 1, 0, 3, 0, 0]  # prefill + verify chunks only
    assert dynamic_coverage(runs) == pytest.approx(2 / 3)


def test_heldout_prompts_must_not_be_calibration_prompts():
    a, b = Prompt("a", "conv", "hello"), Prompt("b", "conv", "other")
    check_disjoint([a], [b])
    with pytest.raises(SpecError, match="held-out"):
        check_disjoint([a, b], [Prompt("c", "qa", "hello")])


def test_export_needs_calibration_prompts_for_calibrated_sources(capsys):
    assert dispatch(["export", "--source", "nanospec"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --source nanospec needs --calibrate") and "\n" not in err


# ---------------------------------------------------------------- EAGLE head, official layout

def head_with_random_weights(model, ecfg):
    head = init_from_target(EagleHead(model.config, ecfg), model).attach(model)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_((torch.randn_like(p) * 0.1).half().float())  # fp16-exact: the files store fp16
    return head


def drafts(head, model, prompt):
    """Top-4 draft ids of a prefill and of one tree level below it."""
    W = model.lm_head.weight
    dr = EagleDrafter(head, W)
    st = dr.prefill(prompt, 5, torch.randn(len(prompt), 64, generator=torch.Generator().manual_seed(1)))
    top = (st.head_in @ W.T).topk(4).indices
    kids = dr.expand(st, top.view(-1)[:2], torch.tensor([len(prompt) + 1] * 2), torch.eye(2, dtype=torch.bool))
    return st.head_in, kids.head_in, (kids.head_in @ W.T).topk(4).indices


@pytest.mark.parametrize("ecfg", [EagleConfig(), EagleConfig(input_norm=False, final_norm=False, feature="post_norm")])
def test_official_layout_round_trip_gives_identical_drafts(tmp_path, ecfg):
    model = tiny_model(0)
    head = head_with_random_weights(model, ecfg)
    save_official(head, tmp_path)
    back = load_official(tmp_path, model)
    assert back.ecfg == head.ecfg
    prompt = torch.randint(3, V, (9,), generator=torch.Generator().manual_seed(2))
    for a, b in zip(drafts(head, model, prompt), drafts(back, model, prompt)):
        assert torch.equal(a, b)


def test_official_layout_uses_the_eagle_names_and_fc_over_embedding_then_feature(tmp_path):
    model = tiny_model(0)
    head = head_with_random_weights(model, EagleConfig(input_norm=False, final_norm=False, feature="post_norm"))
    notes = save_official(head, tmp_path)
    sd = load_file(tmp_path / "model.safetensors")
    hf_cfg = json.loads((tmp_path / "config.json").read_text())
    assert notes == []  # official conventions: runs unchanged in EAGLE / SGLang / vLLM
    assert hf_cfg["architectures"] == ["LlamaForCausalLM"] and hf_cfg["num_hidden_layers"] == 1
    assert {"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.mlp.down_proj.weight",
            "layers.0.post_attention_layernorm.weight"} <= sd.keys()
    assert all(k.startswith(("fc.", "layers.0.")) for k in sd) and "layers.0.input_layernorm.weight" not in sd
    f, e = torch.randn(3, 64), torch.randn(3, 64)
    official = torch.cat([e, f], -1).half() @ sd["fc.weight"].T + sd["fc.bias"]  # EAGLE: fc(cat(embeds, hidden))
    assert torch.allclose(official.float(), head.fc(torch.cat([f, e], -1)), atol=1e-2)


def test_head_with_our_conventions_is_exported_with_notes(tmp_path):
    model = tiny_model(0)
    notes = save_official(head_with_random_weights(model, EagleConfig()), tmp_path)
    assert any("pre-norm" in n for n in notes) and any("final norm" in n for n in notes)


def test_official_layout_names_the_architecture_sglang_selects_when_asked(tmp_path):
    model = tiny_model(0)
    save_official(head_with_random_weights(model, EagleConfig()), tmp_path, "LlamaForCausalLMEagle")
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle"]
    assert load_official(tmp_path, model).ecfg == EagleConfig()


def test_calibration_reads_instruction_corpora_evenly_and_skips_long_prompts(tmp_path):
    from core.maps.export import calibration_prompts
    rows = [{"source": "x", "category": "qa", "prompt": f"q{i}" + ("!" * 50 * (i == 3)), "response": "a"} for i in range(8)]
    path = tmp_path / "instructions_qa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    prompts = calibration_prompts([path], 3, 20)
    assert [p.text for p in prompts] == ["q0", "q2", "q5"] and {p.category for p in prompts} == {"qa"}


def test_nanospec_ranking_mixes_needed_tokens_and_corpus_half_and_half_then_candidates():
    from core.maps.export import source_keys
    runs = [[step([3, 3, 3, 4], [True] * 4, [["verify", [2]]])]]
    corpus = torch.tensor([0, 10, 0, 0, 0, 90])  # p: id 1 0.1, id 5 0.9; needed p: id 3 0.75, id 4 0.25
    assert ranking(source_keys("nanospec", corpus, runs, 6), 6).tolist() == [5, 3, 4, 1, 2, 0]
    assert ranking(source_keys("generations", corpus, runs, 6), 6).tolist() == [3, 4, 5, 1, 0, 2]
    assert ranking(source_keys("freq", corpus, runs, 6), 6).tolist() == [5, 1, 0, 2, 3, 4]


def test_an_instruction_row_with_a_non_string_category_is_a_clear_error(tmp_path):
    from core.prompts import load_prompts
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"source": "x", "category": ["qa"], "prompt": "hi"}))
    with pytest.raises(SpecError, match="bad.jsonl:1: need fields"):
        load_prompts(path)
