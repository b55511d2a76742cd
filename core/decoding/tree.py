"""Draft trees (EAGLE-2-style dynamic tree; a chain is a tree with top_k = 1) and their verification.

Greedy verification emits exactly the target's greedy tokens. Sampling uses recursive rejection
sampling over children drawn *without replacement* from the draft's pruned distribution q (zero
outside I_t), which keeps the target distribution for chains and trees alike. Context branches
(core/decoding/context.py) merge into the same tree; their nodes are deterministic proposals (q = δ_x).
"""
from dataclasses import dataclass, field

import torch

from core.decoding.draft import DraftState
from core.decoding.protocols import Drafter, Head
from core.kernels import triton as kernels


@dataclass
class Tree:
    tokens: list = field(default_factory=list)
    parents: list = field(default_factory=list)  # -1 = child of the root (the last committed token)
    logp: list = field(default_factory=list)  # log q(token | parent)
    depth: list = field(default_factory=list)  # 1-based
    score: list = field(default_factory=list)  # cumulative log q
    q: dict = field(default_factory=dict)  # parent node -> (ids_map, q over I) used to sample its children
    origin: list = field(default_factory=list)  # "model" | "context"
    row: list = field(default_factory=list)  # the drafter's pending row of an expanded node, else -1
    head_calls: int = 0

    def add(self, token, parent, logp, score, origin="model", row=-1) -> int:
        self.origin.append(origin)
        self.row.append(row)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.logp.append(float(logp))
        self.depth.append(1 if parent < 0 else self.depth[parent] + 1)
        self.score.append(float(score))
        return len(self.tokens) - 1

    def __len__(self):
        return len(self.tokens)

    def children(self, node) -> list:
        return [i for i, p in enumerate(self.parents) if p == node]


def tree_shape(cfg):
    """(depth, children per node, total nodes) for cfg.shape."""
    if cfg.shape == "chain":
        return cfg.gamma, 1, cfg.gamma
    return cfg.depth, cfg.top_k, cfg.tree_size


def sample_children(logits_row, k, temperature, gen):
    """k draws without replacement (Gumbel-top-k) from q = softmax(logits / T): (order, log q[order], log q)."""
    logq = torch.log_softmax(logits_row / temperature, dim=-1)
    u = torch.rand(logq.shape, generator=gen).clamp_(1e-20, 1.0).to(logq.device)  # gen is a CPU generator
    order = (logq - torch.log(-torch.log(u))).topk(min(k, logq.numel())).indices  # sampling order
    return order, logq[order], logq


def draft_tree(drafter: Drafter, head: Head, root: DraftState, root_pos: int, cfg, gen, timer, prune=True) -> Tree:
    """Greedy: EAGLE-2 — expand the top-k nodes of each level, then keep the `size` best by
    cumulative log q. Sampling: how many children a node gets is fixed before they are drawn
    (budget handed out in frontier order), since a prune that looks at the drawn children would bias
    the multi-candidate rejection sampling."""
    depth, k, size = tree_shape(cfg)
    sampling = cfg.temperature > 0
    t = Tree()
    frontier, states, pend = [-1], root, {}
    for level in range(depth):
        with timer("lm_head"):
            logits, ids_map = head.score(states.head_in)  # [f, |I|]
        t.head_calls += 1
        budget = size - len(t) if sampling else k * len(frontier)
        new = _add_level(t, frontier, logits, ids_map, k, budget, cfg.temperature, gen, head.backend)
        if level == depth - 1 or not new or (sampling and len(t) >= size):
            break
        nxt = sorted(new, key=lambda i: (-t.score[i], i))[:k]
        parent_rows = torch.tensor([frontier.index(t.parents[i]) for i in nxt])
        parent = DraftState(states.head_in[parent_rows], None if states.state is None else states.state[parent_rows])
        mask = _expand_mask(t, nxt, pend)
        for i in nxt:
            pend[i] = t.row[i] = len(pend)
        ids = torch.tensor([t.tokens[i] for i in nxt])
        pos = torch.tensor([root_pos + t.depth[i] for i in nxt])
        with timer("draft_backbone"):
            states = drafter.expand(parent, ids, pos, mask)
        frontier = nxt
    return t if sampling or not prune else _prune(t, size)


def _add_level(t, frontier, logits, ids_map, k, budget, temperature, gen, backend) -> list:
    """Children of each frontier node, in frontier order, at most `budget` in all."""
    if temperature == 0:  # fused log-softmax + top-k + remap to full-vocabulary ids: [f, k]
        top_ids, top_logp = kernels.head_epilogue(logits, ids_map, k, backend)
    new = []
    for row, par in enumerate(frontier):
        n_kids = min(k, budget - len(new))
        if n_kids <= 0:
            break
        if temperature == 0:
            toks, lps = top_ids[row, :n_kids].tolist(), top_logp[row, :n_kids].tolist()
        else:
            order, lps, logq = sample_children(logits[row], n_kids, temperature, gen)
            t.q[par] = (ids_map, logq.exp())
            toks = order.tolist() if ids_map is None else ids_map[order.to(ids_map.device)].tolist()
            lps = lps.tolist()
        base = 0.0 if par < 0 else t.score[par]
        new += [t.add(tok, par, lp, base + lp) for tok, lp in zip(toks, lps)]
    return new


def _expand_mask(t, nxt, pend) -> torch.Tensor:
    """[f, n_pending + f]: each frontier node sees its expanded ancestors and itself."""
    m = torch.zeros(len(nxt), len(pend) + len(nxt), dtype=torch.bool)
    for j, i in enumerate(nxt):
        m[j, len(pend) + j] = True
        a = t.parents[i]
        while a >= 0:
            m[j, pend[a]] = True
            a = t.parents[a]
    return m


def _prune(t: Tree, size: int, fixed=()) -> Tree:
    """Keep the nodes in `fixed` and the best others by score, `size` in all; a node never ranks below its
    descendants (scores fall along every path, ties keep the lower index: the parent)."""
    fixed = set(fixed)
    rest = sorted((i for i in range(len(t)) if i not in fixed), key=lambda i: (-t.score[i], i))
    keep = sorted(fixed | set(rest[: max(size - len(fixed), 0)]))
    remap = {old: new for new, old in enumerate(keep)}
    out = Tree(head_calls=t.head_calls)
    out.q = {remap.get(p, p): q for p, q in t.q.items() if p < 0 or p in remap}
    for i in keep:
        out.add(t.tokens[i], -1 if t.parents[i] < 0 else remap[t.parents[i]], t.logp[i], t.score[i], t.origin[i],
                t.row[i])
    return out


def merge_context(t: Tree, branches, size: int, extra: int, sampling: bool) -> Tree:
    """Merge context branches (core/decoding/context.py Branch: tokens, logp) into the model tree `t` (greedy: not yet
    pruned) and keep `size` + min(new context nodes, `extra`) nodes by one rule, cumulative log-prob. A branch follows
    the tree while its tokens are already children (shared prefix: the node's score becomes the better of
    the two), then hangs new "context" nodes. Sampling keeps every model node (a prune that looks at drawn
    children would bias rejection sampling) and ranks only the context nodes."""
    kids = _children_by_token(t)
    n_model = len(t)
    for b in branches:
        node, score = -1, 0.0
        for tok, lp in zip(b.tokens, b.logp):
            score += lp
            c = kids.get((node, tok))
            if c is None:
                c = kids[(node, tok)] = t.add(tok, node, lp, score, origin="context")
            else:
                t.score[c] = max(t.score[c], score)
            node = c
    size += min(len(t) - n_model, extra)
    return _prune(t, size, fixed=range(n_model) if sampling else ())


def verify_inputs(t: Tree, root_token: int, root_pos: int):
    """Target inputs for [root] + nodes: ids [1+k], positions [1+k], tree mask [1+k, 1+k]."""
    n = len(t) + 1
    ids = torch.tensor([root_token] + t.tokens)
    pos = torch.tensor([root_pos] + [root_pos + d for d in t.depth])
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:, 0] = True
    for i, p in enumerate(t.parents):
        mask[i + 1] = mask[p + 1] if p >= 0 else mask[0]
        mask[i + 1, i + 1] = True
    return ids, pos, mask


def accept_greedy(t: Tree, logits, top2=None) -> tuple:
    """Follow the target's argmax through the tree: (accepted node indices, bonus token, the two largest logits of
    each row it read [len(path) + 1, 2]: the root's, then the accepted nodes'). top2: a runner's Runner.top2."""
    path, node, tops = [], -1, []
    kids = _children_by_token(t)
    top2 = top2 or (lambda rows: (rows.argmax(-1).tolist(), rows.topk(2, dim=-1).values))
    while True:
        best, top = top2(logits[node + 1:node + 2])
        tok = best[0]
        tops.append(top)
        nxt = kids.get((node, tok))
        if nxt is None:
            return path, tok, torch.cat(tops)
        path.append(nxt)
        node = nxt


def held_rows(t: Tree, path: list) -> list:
    """The drafter's pending rows of the accepted path's leading expanded nodes: the drafts it already holds (every
    level but the last is expanded, so they lead the path)."""
    rows = []
    for i in path:
        if t.row[i] < 0:
            break
        rows.append(t.row[i])
    return rows


def _children_by_token(t: Tree) -> dict:
    return {(p, tok): i for i, (p, tok) in enumerate(zip(t.parents, t.tokens))}


def target_probs(logits_row, temperature, top_p) -> torch.Tensor:
    """p = top-p(softmax(logits / T)) over the full vocabulary, fp32."""
    p = torch.softmax(logits_row.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, si = p.sort(descending=True)
        drop = sp.cumsum(0) - sp >= top_p  # keep the smallest prefix with mass ≥ top_p
        p = p.scatter(0, si[drop], 0.0)
        p = p / p.sum()
    return p


def accept_sample(t: Tree, logits, temperature, top_p, gen) -> tuple:
    """Recursive rejection sampling, children drawn without replacement from q."""
    path, node = [], -1
    while True:
        p = target_probs(logits[node + 1], temperature, top_p)
        kids = t.children(node)
        nxt = _try_children(t, node, kids, p, gen) if kids else None
        if nxt is None:
            return path, int(torch.multinomial(p.cpu(), 1, generator=gen))  # gen is a CPU generator
        path.append(nxt)
        node = nxt


def _try_children(t, node, kids, p, gen):
    """Model children first, then context children (merge_context appends them). Model child x: accept with
    prob min(1, p(x)/q(x)); else p ← norm(max(p − q, 0)), q ← q without x. Context child x (q = δ_x): accept
    with prob p(x); else p ← norm(p without x). Leaves the residual in p (in place) when every child is rejected."""
    model = [c for c in kids if t.origin[c] == "model"]
    c = _try_model_children(t, node, model, p, gen) if model else None
    if c is not None:
        return c
    for c in kids:
        if t.origin[c] == "context":
            x = t.tokens[c]
            if float(torch.rand(1, generator=gen)) < float(p[x]):
                return c
            p[x] = 0
            if p.sum() > 0:
                p /= p.sum()
    return None


def _try_model_children(t, node, kids, p, gen):
    ids_map, q_act = t.q[node]
    q = torch.zeros_like(p)
    q[ids_map if ids_map is not None else slice(None)] = q_act.float()
    for c in kids:
        x = t.tokens[c]
        if q[x] > 0 and float(torch.rand(1, generator=gen)) * float(q[x]) < float(p[x]):
            return c
        r = (p - q).clamp_(min=0)
        if r.sum() > 0:
            p.copy_(r / r.sum())
        q[x] = 0
        if q.sum() <= 0:
            break
        q /= q.sum()
    return None
