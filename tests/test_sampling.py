"""Speculative sampling keeps the target distribution: chi-square against the exact joint law of the
first three new tokens, for every method, chain and tree, with a draft that differs from the target."""
import itertools

import pytest
import torch

from core.config import SpecConfig
from core.decoding.draft import ModelDrafter
from core.decoding.engine import generate
from core.decoding.heads import build_head

V = 5
pytestmark = pytest.mark.usefixtures("single_thread")
N = 1500


class BigramRunner:
    """A Runner whose next-token logits depend on the current token only: hidden = onehot(id),
    logits = hidden @ Wᵀ = table[id]. Context-free, so tree masks and caches are trivially right."""
    device = torch.device("cpu")

    def __init__(self, table):
        self.table, self.head_weight = table, table.T.contiguous()
        self.vocab_size = self.d = V
        self.reset()

    def reset(self):
        self.n_committed = self.n_pending = 0

    def forward(self, ids, pos, mask=None):
        h = torch.nn.functional.one_hot(ids, V).float()
        self.n_pending += ids.numel()
        return h, h

    def logits(self, hidden):
        return hidden @ self.head_weight.T

    def top2(self, logits):
        return logits.argmax(-1).tolist(), logits.topk(2, dim=-1).values

    def commit(self, keep):
        self.n_committed += len(keep)
        self.n_pending = 0


def table(seed, scale):
    return torch.randn(V, V, generator=torch.Generator().manual_seed(seed)) * scale


TARGET, DRAFT = table(0, 1.5), table(1, 1.5)


def exact_joint(temperature):
    p = torch.softmax(TARGET / temperature, dim=-1)
    prev = 0  # the prompt's last token
    return {(a, b, c): float(p[prev, a] * p[a, b] * p[b, c]) for a, b, c in itertools.product(range(V), repeat=3)}


def chi2_pvalue(counts, probs, n):
    cells = sorted(probs, key=probs.get)
    stat, dof, pool_o, pool_e = 0.0, 0, 0, 0.0
    for c in cells:  # pool the small cells so every expected count is ≥ 5
        pool_o, pool_e = pool_o + counts.get(c, 0), pool_e + probs[c] * n
        if pool_e >= 5:
            stat, dof, pool_o, pool_e = stat + (pool_o - pool_e) ** 2 / pool_e, dof + 1, 0, 0.0
    dof -= 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(stat / 2)))


@pytest.mark.slow  # N = 1500 sampled generations per case
@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("method", ["ar", "full", "frspec", "nanospec", "slimspec", "nanoslim", "slimspec-rescore",
                                    "nanospec-preview"])
def test_sampling_keeps_the_target_distribution(method, shape):
    method, _, option = method.partition("-")
    counts = {}
    for seed in range(N):
        cfg = SpecConfig(method=method, shape=shape, temperature=1.0, max_new_tokens=3, seed=seed, w_max=3,
                         k_pre=1, k_ver=1, rank=2, gamma=2, depth=2, top_k=2, tree_size=4, timing=False,
                         rescore=2 if option == "rescore" else 0, preview=1 if option == "preview" else 0)
        drafter = ModelDrafter(BigramRunner(DRAFT))
        head = None if method == "ar" else build_head(method, drafter.head_weight, cfg, fr_ids=torch.tensor([0, 2, 3]))
        toks = tuple(t for r in generate(BigramRunner(TARGET), drafter, head, [0], cfg) for t in r.emitted)
        counts[toks] = counts.get(toks, 0) + 1
    assert chi2_pvalue(counts, exact_joint(1.0), N) > 1e-3


def test_top_p_sampling_keeps_the_truncated_target_distribution():
    from core.decoding.tree import target_probs
    p = target_probs(torch.tensor([2.0, 1.0, 0.0, -5.0]), 1.0, 0.8)
    assert p[3] == 0 and p[2] == 0 and abs(float(p.sum()) - 1) < 1e-6
