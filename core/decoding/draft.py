"""Model drafters: the target drafting for itself ("self", a vocabulary oracle) or a separate model
sharing its tokenizer. Both run a Runner with their own KV cache; EAGLE lives in core/decoding/eagle.py."""
from dataclasses import dataclass

import torch


@dataclass
class DraftState:
    head_in: torch.Tensor  # [k, d] input of the draft LM head
    state: torch.Tensor | None = None  # [k, *] drafter-specific (EAGLE: layer output)


class ModelDrafter:
    keeps_drafts = True  # a draft's cache entry is its token's, as extend would make it

    def __init__(self, runner, name="self"):
        self.runner, self.name = runner, name
        self.head_weight = runner.head_weight
        self.d = runner.d
        self.pos = 0

    def _feed(self, ids) -> DraftState:
        ids = torch.as_tensor(ids, dtype=torch.long).view(-1)
        hidden, _ = self.runner.forward(ids, torch.arange(self.pos, self.pos + ids.numel()), None)
        self.runner.commit(torch.arange(ids.numel()))
        self.pos += ids.numel()
        return DraftState(hidden[-1:])

    def prefill(self, prompt_ids, first, feats=None) -> DraftState:
        self.runner.reset()
        self.pos = 0
        return self._feed(list(prompt_ids) + [int(first)])

    def extend(self, next_ids, feats=None) -> DraftState:
        return self._feed(next_ids)

    def expand(self, parent: DraftState, ids, pos, mask) -> DraftState:
        hidden, _ = self.runner.forward(ids, pos, mask)
        return DraftState(hidden)

    def rollback(self, keep=()) -> int:
        """Commit the pending rows `keep` (accepted drafts, in order), drop the rest: their tokens are in the cache."""
        self.runner.commit(torch.as_tensor(list(keep), dtype=torch.long))
        self.pos += len(keep)
        return len(keep)
