"""On the default model (SmolLM2-135M-Instruct), every method's greedy output equals plain greedy
decoding, one shipped prompt per category (32 new tokens, one shared model instance)."""
import pytest

from core.config import SpecConfig
from core.prompts import example_prompts
from core.trace.stats import compare_to_ar

METHODS = ["full", "frspec", "nanospec", "slimspec", "nanoslim", "nanospec", "nanoslim"]


@pytest.mark.parametrize("i", range(7))
def test_greedy_output_equals_plain_greedy_decoding(default_pipeline, i):
    prompt = example_prompts()[i]
    method = METHODS[i % len(METHODS)]
    shape = "chain" if i % 2 else "tree"
    ar = list(default_pipeline.run(prompt.text, SpecConfig(method="ar", max_new_tokens=32)))
    spec = list(default_pipeline.run(prompt.text, SpecConfig(method=method, shape=shape, max_new_tokens=32)))
    cmp = compare_to_ar(spec, ar)
    assert cmp["identical"], f"{prompt.category}/{method}/{shape}: {cmp}"
