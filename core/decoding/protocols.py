"""The contracts between the engine's parts, as code: what core/decoding/engine.py and core/decoding/tree.py call on a
target Runner, a Drafter and a draft LM Head, and what core/pipeline.py reads from them (their annotations).

Implementations (tests/test_interfaces.py checks each satisfies its Protocol):
    Runner  — EagerRunner (core/runtime/runner.py), FastRunner (core/runtime/fast.py), picked by
              `core.runtime.fast.make_runner`
    Drafter — ModelDrafter (core/decoding/draft.py), EagleDrafter (core/decoding/eagle.py)
    Head    — DraftHead (core/decoding/heads.py), built by `core.decoding.heads.build_head`
Shapes: n new entries, k tree nodes, V vocabulary, d model width, |I| active vocabulary.
"""
from typing import Protocol, runtime_checkable

import torch

from core.decoding.stream import StreamEvent


@runtime_checkable
class Runner(Protocol):
    """A causal LM with a KV cache split into committed entries and pending (speculative) ones."""
    model: torch.nn.Module
    tokenizer: object                 # may be None (an EAGLE drafter's one-layer runner)
    d: int
    vocab_size: int
    head_weight: torch.Tensor         # the LM head W [V, d] (tied or not)
    device: torch.device
    n_committed: int
    n_pending: int
    runtime_name: str                 # "eager" | "fast"
    fallback_reason: str              # why not the fast runtime ("" when nothing fell back)

    def reset(self) -> None:
        """Empty the cache."""

    def forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None = None,
                embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids, pos [n]; mask bool [n, n_pending + n] over pending + new entries (None: all pending visible,
        causal among the new); embeds [n, d] in place of the ids' embeddings (EAGLE's fc output).
        New tokens see every committed entry. Returns (hidden after the final norm [n, d], features =
        last layer before the norm [n, d]); the new entries become pending."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [n, d] -> full-vocabulary logits [n, V], fp32."""

    def commit(self, keep: torch.Tensor) -> None:
        """Keep pending entries `keep` [m] (indices into the pending region, in order); drop the rest."""

    def top2(self, logits: torch.Tensor) -> tuple[list, torch.Tensor]:
        """logits [n, V] -> (the greedy token of each row as torch.argmax picks it, the two largest logits [n, 2])."""


@runtime_checkable
class DraftState(Protocol):
    """What a drafter hands the draft LM head, one row per node (core.decoding.draft.DraftState is the dataclass)."""
    head_in: torch.Tensor             # [k, d] input of the draft LM head
    state: torch.Tensor | None        # [k, *] drafter-specific (EAGLE: the layer output f^), else None


@runtime_checkable
class Drafter(Protocol):
    """Proposes the draft tree's hidden states; keeps its own cache (committed + pending)."""
    name: str                         # "self", "eagle" or the draft model's id
    d: int                            # width of the head input
    head_weight: torch.Tensor         # the draft's full LM head W [V, d]: rows of every draft Head
    keeps_drafts: bool                # rollback keeps the accepted drafts' entries (a draft model; EAGLE: False)

    def prefill(self, prompt_ids: torch.Tensor, first: int, feats: torch.Tensor) -> DraftState:
        """prompt_ids [n]; first = the token the target emitted after the prompt; feats [n, D] = the target's
        features at the prompt positions. Returns the state that drafts the children of `first`."""

    def extend(self, next_ids: torch.Tensor, feats: torch.Tensor) -> DraftState:
        """After a verify: next_ids = [accepted..., bonus], feats = target features of [root, accepted...]
        (EAGLE pairs feats[i] with next_ids[i]; a model draft feeds next_ids). Commits them."""

    def expand(self, parent: DraftState, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> DraftState:
        """Tree nodes ids, pos [k] under `parent` (one row per node); mask bool [k, n_pending + k].
        The new entries become pending."""

    def rollback(self, keep=()) -> int:
        """Drop every pending entry but `keep` (pending rows of accepted draft tokens, in order), which a drafter that
        holds its drafts as the tokens they are (a draft model) commits, so extend need not take them in again.
        Returns how many it kept (EAGLE: 0; its drafts' entries rest on its own features, not the target's)."""


@runtime_checkable
class Head(Protocol):
    """A draft LM head over an active vocabulary I: q = softmax(logits) (zero outside I)."""
    name: str                         # full | frspec | nanospec | slimspec | nanoslim
    backend: str                      # kernels backend: torch | triton | auto
    vocab_size: int                   # V
    needs_prefill_logits: bool        # on_prefill reads every prompt row's logits (NanoSpec's top-K_pre), not the last

    def active_ids(self) -> torch.Tensor | None:
        """I as full-vocabulary ids [|I|] in logits order; None = the whole vocabulary."""

    def n_active(self) -> int:
        """|I|."""

    def in_vocab(self, token_ids: list) -> list:
        """Per token: is it in I now (the I the draft used at this step)."""

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [n, d] -> fp32 logits [n, |I|] over active_ids() order."""

    def score(self, h: torch.Tensor) -> tuple:
        """h [n, d] -> (fp32 logits [n, k], their full-vocabulary ids [k] or None = all of V): what the draft picks
        from; logits() over active_ids(), or a rescoring head's exact logits over its preview's top ids."""

    def top_pre(self, logits: torch.Tensor) -> torch.Tensor:
        """The ids S⁽⁰⁾ takes from prompt logits [n, V]: each row's top-K_pre, [n * K_pre] (empty: K_pre = 0)."""

    def on_prefill(self, prompt_ids: torch.Tensor, prefill_top: torch.Tensor, timer=None) -> StreamEvent | None:
        """After the prefill (top_pre of every prompt row's logits, in order): NanoSpec's S⁽⁰⁾; None for heads
        without a stream."""

    def on_verify(self, tree_ids: list, verify_logits: torch.Tensor, timer=None) -> StreamEvent | None:
        """After a verify (logits [1 + k, V]): S ← S ⊕ C_draft ⊕ C_ver; None for heads without a stream."""
