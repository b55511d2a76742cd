"""bench_pair's variant names: one grammar, METHOD[-chainG | -treeDxKxN | -auto][-noctx | -ctx][-rM | -pM][-wWEIGHTS]."""
import pytest

from bench.suites.pair import variant


def test_a_variant_name_spells_its_method_shape_context_and_draft_weights():
    assert variant("nanospec-tree5x2x10-noctx-wint4") == (
        "nanospec", {"shape": "tree", "depth": 5, "top_k": 2, "tree_size": 10, "context": "off", "draft_weights": "int4"})
    assert variant("full-chain3-ctx") == ("full", {"shape": "chain", "gamma": 3, "context": "on"})
    assert variant("hf-assisted") == ("hf-assisted", {})
    assert variant("slimspec-noctx-r512") == ("slimspec", {"context": "off", "rescore": 512})
    assert variant("nanospec-auto") == ("nanospec", {"shape": "auto"})  # the cost model's choice, as a user's run


@pytest.mark.parametrize("name", ["ar-wint4", "hf-chain2", "nanospec-chain", "nanospec-wint3", "bogus", "nanospec-tree4x2",
                                  "nanospec-r16", "full-r8"])
def test_a_name_outside_the_grammar_is_refused(name):
    assert variant(name) is None


def test_the_memory_bound_streams_every_weight_but_the_gathered_embeddings(tiny_target):
    from bench.bandwidth import memory_bound, step_bytes
    emb = tiny_target.get_input_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in tiny_target.parameters())
    tied = emb is tiny_target.get_output_embeddings().weight
    assert step_bytes(tiny_target) == (total if tied else total - emb.numel() * emb.element_size())
    rows = [{"variant": "ar", "wall_s": 1.0, "new_tokens": 10}, {"variant": "hf", "wall_s": 2.0, "new_tokens": 10}]
    bound = memory_bound(rows, tiny_target, gbs=step_bytes(tiny_target) / 0.05 / 1e9)  # a 50 ms floor
    assert (bound["ar_ms"], bound["hf_ms"], bound["floor_ms"], bound["best_x_hf"]) == (100.0, 200.0, 50.0, 4.0)


def test_a_window_suffix_sets_the_stream_window_of_stream_heads_only():
    assert variant("nanospec-W3072-p64") == ("nanospec", {"w_max": 3072, "preview": 64})
    assert variant("nanoslim-W6144") == ("nanoslim", {"w_max": 6144})
    assert variant("full-W3072") is None


def test_a_preview_suffix_names_nanospecs_low_rank_preview_only():
    assert variant("nanospec-noctx-p64") == ("nanospec", {"context": "off", "preview": 64})
    assert variant("slimspec-p64") is None and variant("nanospec-r64-p64") is None


def test_the_memory_bound_gives_our_generation_phase_apart_where_the_rows_time_it(tiny_target):
    from bench.bandwidth import memory_bound
    rows = [{"variant": "ar", "wall_s": 1.0, "new_tokens": 10, "decode_tokens": 9, "decode_s": 0.45}]
    assert memory_bound(rows, tiny_target, gbs=1.0)["ar_decode_ms"] == 50.0
    assert "ar_decode_ms" not in memory_bound([{"variant": "ar", "wall_s": 1.0, "new_tokens": 10}], tiny_target, gbs=1.0)


def test_the_table_sets_each_variants_generation_phase_beside_our_ars():
    from bench.suites.pair import table
    rows = [{"variant": "ar", "wall_s": 1.0, "new_tokens": 10, "decode_tokens": 9, "decode_s": 0.9},
            {"variant": "llamacpp", "wall_s": 1.0, "new_tokens": 10, "decode_tokens": 9, "decode_s": 0.45},
            {"variant": "hf", "wall_s": 2.0, "new_tokens": 10}]
    got = {r["variant"]: r["x_ar_decode"] for r in table(rows, ["ar", "llamacpp", "hf"])}
    assert got == {"ar": 1.0, "llamacpp": 2.0, "hf": ""}


def test_an_auto_variant_names_what_auto_chose_and_a_fixed_shape_names_nothing(monkeypatch):
    from dataclasses import replace

    from bench.suites.pair import auto_choice
    from core.config import SpecConfig
    from core.cost import choose
    monkeypatch.setattr(choose, "resolve_shape", lambda pipe, cfg: (replace(cfg, method="ar", shape="tree"), "note"))
    cfg, chose = auto_choice(None, SpecConfig(method="nanospec", shape="auto"))
    assert cfg.method == "ar" and chose == "plain decoding"
    monkeypatch.setattr(choose, "resolve_shape", lambda pipe, cfg: (replace(cfg, shape="chain", gamma=2, context="on"), ""))
    assert auto_choice(None, SpecConfig(method="nanospec", shape="auto"))[1] == "chain 2 + context"
    assert auto_choice(None, SpecConfig(method="nanospec", shape="tree")) == (SpecConfig(method="nanospec", shape="tree"), "")


def test_the_recorded_best_speculation_names_autos_choice(monkeypatch):
    from bench import results
    from bench.suites.pair import record
    got = {}
    monkeypatch.setattr(results, "append_row", lambda kind, model, figures, *a, **k: got.update(figures) or {"figures": figures})
    rows = [{"variant": "nanospec-auto", "x_ar": 0.99, "x_ar_decode": "", "identical": "7/7", "chose": "plain decoding"}]
    record(rows, type("Args", (), {"model": "m", "threads": 2, "draft": "eagle"})(), [])
    assert got["best_spec_label"] == "nanospec-auto → plain decoding"
