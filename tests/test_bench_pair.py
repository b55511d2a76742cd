"""bench_pair's variant names: one grammar, METHOD[-chainG | -treeDxKxN][-noctx | -ctx][-wWEIGHTS]."""
import pytest

from core.experiments.bench_pair import variant


def test_a_variant_name_spells_its_method_shape_context_and_draft_weights():
    assert variant("nanospec-tree5x2x10-noctx-wint4") == (
        "nanospec", {"shape": "tree", "depth": 5, "top_k": 2, "tree_size": 10, "context": "off", "draft_weights": "int4"})
    assert variant("full-chain3-ctx") == ("full", {"shape": "chain", "gamma": 3, "context": "on"})
    assert variant("hf-assisted") == ("hf-assisted", {})


@pytest.mark.parametrize("name", ["ar-wint4", "hf-chain2", "nanospec-chain", "nanospec-wint3", "bogus", "nanospec-tree4x2"])
def test_a_name_outside_the_grammar_is_refused(name):
    assert variant(name) is None
