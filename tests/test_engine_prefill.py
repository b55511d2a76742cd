"""The engine's prompt pass: what NanoSpec's stream starts from."""
import torch

from core.config import SpecConfig
from core.decoding.engine import PRE_ROWS


def test_prefill_stream_holds_the_top_k_pre_of_every_prompt_row(default_pipeline):
    """S⁽⁰⁾ = prompt ⊕ top-K_pre of each prompt row's logits, in order, although the engine takes them a few rows
    a product (PRE_ROWS): the prompt here spans several such blocks."""
    pipe = default_pipeline
    text = "List three facts about the Moon, then three about Mars, each in one short sentence."
    rec = next(iter(pipe.run(text, SpecConfig(method="nanospec", max_new_tokens=2))))
    ids = torch.tensor(pipe.prompt_ids(text))
    assert ids.numel() > 2 * PRE_ROWS
    pipe.target.reset()
    hidden, _ = pipe.target.forward(ids, torch.arange(ids.numel()), None)
    whole = torch.cat([pipe.target.logits(hidden[:-1]), pipe.target.logits(hidden[-1:])])  # [n, V] at once
    whole = whole.topk(3, dim=-1).indices.reshape(-1).tolist()
    assert rec.stream["appended"] == [["prompt", ids.tolist()], ["prefill", whole]]
