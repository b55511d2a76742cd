"""EagerRunner: a transformers causal LM with a KV cache split into committed and pending entries.

The reference execution path (the fast runtime in core/runtime/fast.py implements the same interface).
Pending entries are speculative (draft tree nodes, verify positions); `commit(keep)` keeps the
accepted ones in place and drops the rest.
"""
import inspect

import torch
from transformers import DynamicCache


def top2(logits) -> tuple[list, torch.Tensor]:
    """(argmax of each row, its two largest values [n, 2]): the greedy token and its margin, in torch."""
    return logits.argmax(-1).tolist(), logits.topk(2, dim=-1).values


def cache_kwarg(module) -> str:
    """The name the decoder's forward takes its KV cache under: `cache` (transformers 5.25) or `past_key_values`
    (5.17); passed under the other name, the cache is silently dropped into **kwargs."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def window_of(hf_cfg, i: int) -> int:
    """Sliding-window size of layer i (0 = full attention)."""
    types = getattr(hf_cfg, "layer_types", None)
    if types:
        return (getattr(hf_cfg, "sliding_window", None) or 0) if types[i] == "sliding_attention" else 0
    return getattr(hf_cfg, "sliding_window", None) or 0  # mistral: every layer


def layer_windows(config) -> dict:
    """{layer type: sliding window (0 = full attention)} where the config types its layers (gemma3), {None: window}
    for one window on every layer (mistral), {} when no layer slides. The rule per layer is window_of."""
    types = getattr(config, "layer_types", None) or [None] * config.num_hidden_layers
    out = {t: window_of(config, i) for i, t in enumerate(types)}
    return out if any(out.values()) else {}


class EagerRunner:
    runtime_name = "eager"
    fallback_reason = ""

    def __init__(self, model, tokenizer=None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.head_weight = model.get_output_embeddings().weight
        self.vocab_size, self.d = self.head_weight.shape
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.device = self.head_weight.device
        self.windows = layer_windows(model.config)
        self.cache_name = cache_kwarg(self.base)
        self._features = None
        self.base.norm.register_forward_pre_hook(self._grab_features)
        self.reset()

    def _grab_features(self, module, args):
        self._features = args[0]

    def reset(self) -> None:
        self.cache = DynamicCache()  # full-length layers: sliding windows live in the masks, so commit can index rows
        self.row_pos = torch.zeros(0, dtype=torch.long)  # position of every cache row (committed, then pending)
        self.n_committed = 0
        self.n_pending = 0

    @torch.no_grad()
    def forward(self, ids, pos, mask=None, embeds=None):
        """ids, pos: [n]; mask: bool [n, n_pending + n] over pending+new entries (None = causal); embeds [n, d]:
        inputs in place of the ids' embeddings (an EAGLE drafter's fc output).

        Returns (hidden after the final norm [n, d], features before the norm [n, d])."""
        n = ids.shape[0]
        self.row_pos = torch.cat([self.row_pos, pos.view(-1).cpu()])
        attn = self._float_mask(n, mask)
        inputs = {"input_ids": ids.view(1, n).to(self.device)} if embeds is None else \
            {"inputs_embeds": embeds.view(1, n, -1).to(self.device, self.head_weight.dtype)}
        out = self.base(**inputs, position_ids=pos.view(1, n).to(self.device),
                        attention_mask=attn, use_cache=True, **{self.cache_name: self.cache})
        self.n_pending += n
        return out.last_hidden_state[0], self._features[0]

    def _float_mask(self, n, mask):
        """[1, 1, n, committed + pending + n] additive mask: 0 = visible, -inf = hidden; sliding windows applied
        here (transformers takes a custom 4D mask as is), as a dict {layer type: mask} where layers are typed."""
        if mask is None:
            mask = torch.ones(n, self.n_pending + n, dtype=torch.bool).tril(self.n_pending)
        full = torch.ones(n, self.n_committed + self.n_pending + n, dtype=torch.bool)
        full[:, self.n_committed:] = mask
        if not self.windows:
            return self._additive(full)
        q = self.row_pos[-n:].view(-1, 1)
        near = {t: full & (q - self.row_pos.view(1, -1) < w) if w else full for t, w in self.windows.items()}
        return self._additive(near[None]) if None in near else {t: self._additive(v) for t, v in near.items()}

    def _additive(self, visible):
        dtype = self.head_weight.dtype
        out = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
        return out.view(1, 1, *visible.shape).to(self.device)

    def logits(self, hidden):
        """[n, d] @ [d, V] -> fp32 [n, V] (with the model's final soft-cap, if any)."""
        z = (hidden @ self.head_weight.T).float()
        if self.softcap:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z

    def top2(self, logits) -> tuple[list, torch.Tensor]:
        return top2(logits)

    def commit(self, keep) -> None:
        """Keep pending entries `keep` (indices into the pending region, in order); drop the rest."""
        keep = torch.as_tensor(keep, dtype=torch.long).view(-1)
        idx = torch.cat([torch.arange(self.n_committed), self.n_committed + keep]).to(self.device)
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            layer.keys = layer.keys.index_select(2, idx)
            layer.values = layer.values.index_select(2, idx)
        self.row_pos = self.row_pos[idx.cpu()]
        self.n_committed += keep.numel()
        self.n_pending = 0
