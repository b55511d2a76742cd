"""NanoSpec's candidate stream S and its active vocabulary I_t = Unique(Suffix(S, W_max)).

Incremental: a ring buffer holds the last W_max entries of S, per-token window counts say which ids
are in I_t, and a slot map keeps I_t dense in [0, |I_t|) so the head's repack buffer only changes in
the rows that enter (and the few that move into freed slots). Per-step cost is O(appended + evicted),
never O(|S|).
"""
from dataclasses import dataclass, field

import torch

from core.kernels import triton as kernels

@dataclass
class StreamEvent:
    entered: list = field(default_factory=list)  # [(id, source)]
    left: list = field(default_factory=list)
    size_s: int = 0
    active: int = 0
    moves: tuple = None  # (slots, ids): repack rows buf[slots] = R[ids]
    appended: list = field(default_factory=list)  # [(source, [ids])]: the chunks S grew by, in order

    def as_trace(self) -> dict:
        return {"entered": [[int(i), s] for i, s in self.entered], "left": [int(i) for i in self.left],
                "size_s": self.size_s, "active": self.active, "appended": [[s, ids] for s, ids in self.appended]}


class CandidateStream:
    def __init__(self, vocab_size: int, w_max: int, mode: str = "suffix", backend: str = "torch"):
        self.V, self.W, self.mode, self.backend = vocab_size, w_max, mode, backend
        self.ring = torch.zeros(w_max, dtype=torch.long)
        self.start = 0  # index of the oldest entry
        self.size = 0  # entries in the window (≤ W_max)
        self.size_s = 0  # |S| so far
        self.counts = torch.zeros(vocab_size, dtype=torch.int32)  # occurrences of each id in the window
        self.slot_of = torch.full((vocab_size,), -1, dtype=torch.long)
        self.ids_by_slot = torch.full((w_max,), -1, dtype=torch.long)
        self.n_active = 0

    def active_ids(self) -> torch.Tensor:
        """I_t in slot order: [|I_t|]."""
        return self.ids_by_slot[: self.n_active]

    def append(self, chunks: list) -> StreamEvent:
        """S ← S ⊕ chunk for each (ids, source) in order; returns this step's net entries and exits."""
        appended, evicted, added, log = [], [], set(), []
        for ids, source in chunks:
            ids = torch.as_tensor(ids, dtype=torch.long).view(-1)
            ids = self._dedup_new(ids, added) if self.mode == "fifo" else ids
            a, e = self._push(ids)
            appended.append(a)
            evicted.append(e)
            log.append((source, ids.tolist()))
        appended, evicted = torch.cat(appended), torch.cat(evicted)
        entered, left = kernels.window_update(self.counts, appended, evicted, self.backend)  # per-token counts
        moves = self._reslot(entered, left)
        return StreamEvent(self._label(entered, chunks), left.tolist(), self.size_s, self.n_active, moves, log)

    def _dedup_new(self, ids: torch.Tensor, added: set) -> torch.Tensor:
        """FIFO-of-unique-ids variant (released code): only ids not already in the window enter."""
        new = [i for i in dict.fromkeys(ids.tolist()) if i not in added and self.counts[i] == 0]
        added.update(new)
        return torch.tensor(new, dtype=torch.long)

    def _push(self, ids: torch.Tensor):
        """Write ids into the ring; returns (appended, evicted) — entries entering / leaving the suffix."""
        k, W = ids.numel(), self.W
        self.size_s += k
        if k >= W:
            evicted = torch.cat([self._window(), ids[: k - W]])
            self.ring[:] = ids[k - W:]
            self.start, self.size = 0, W
            return ids, evicted
        n_evict = max(0, self.size + k - W)
        evicted = self.ring[(self.start + torch.arange(n_evict)) % W].clone()
        self.start, self.size = (self.start + n_evict) % W, self.size - n_evict
        self.ring[(self.start + self.size + torch.arange(k)) % W] = ids
        self.size += k
        return ids, evicted

    def _window(self) -> torch.Tensor:
        return self.ring[(self.start + torch.arange(self.size)) % self.W].clone()

    def _reslot(self, entered: torch.Tensor, left: torch.Tensor):
        """Keep I_t dense in slots [0, n): entered ids fill freed slots, tail ids move into holes."""
        n_old, n_new = self.n_active, self.n_active - left.numel() + entered.numel()
        freed = self.slot_of[left]
        self.slot_of[left] = -1
        self.ids_by_slot[freed] = -1
        holes = freed[freed < n_new].sort().values
        tail = torch.arange(n_old, max(n_new, n_old))
        movers = self.ids_by_slot[n_new:n_old]
        movers = movers[movers >= 0]
        targets, fill = torch.cat([holes, tail]), torch.cat([entered, movers])
        self.ids_by_slot[targets] = fill
        self.slot_of[fill] = targets
        self.ids_by_slot[n_new:] = -1
        self.n_active = n_new
        return targets, fill

    def _label(self, entered: torch.Tensor, chunks: list) -> list:
        """Source of each entered id: the first chunk of this step that holds it."""
        todo = set(entered.tolist())
        out = []
        for ids, source in chunks:
            for i in torch.as_tensor(ids).view(-1).tolist():
                if i in todo:
                    todo.discard(i)
                    out.append((i, source))
        return out
