"""Trees from a drafter's distribution, and the node budget that says when they pay.

A drafter proposes its chain (the *spine*) and, per node, the distribution it drew it from.
Where it doubted, the runner-up tokens become extra leaves: siblings of a spine node, children
of the node before it (EAGLE-2's confidence-ordered top-k expansion, kept one level deep so the
drafter's own state stays a chain: an accepted extra leaf ends the round like a correction).

The expected value of a shape is ``expected_tokens_per_cost``: the tokens a round yields on
average (1 + the chance each node is on the accepted path, the drafter's probabilities
standing in for the target's, scaled by the acceptance the width policy measured) over what it
costs in plain steps (the verify pass over its nodes, from the calibration table, plus the
drafting). ``NodeBudget`` adds leaves, most valuable first, while that ratio grows, and keeps
the chain when no leaf pays: on hardware where a verify of 16 tokens costs two steps few do,
on flat hardware many do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from app.engine.mlx_types import float_rows, int_rows
from app.engine.proposal import Proposal

VerifyCost = Callable[[int], float]  # a pass over n tokens, in plain steps


@dataclass(frozen=True)
class Leaf:
    depth: int  # 0-based: a sibling of spine node ``depth``
    token: int
    prob: float  # the drafter's probability of it


def expected_tokens(spine_probs: Sequence[float], leaves: Sequence[Leaf]) -> float:
    """Tokens a round yields on average: the target's own one, plus every node's chance of
    being on the accepted path (``spine_probs[d]``: spine node ``d`` accepted once reached)."""
    reach = [1.0]
    for p in spine_probs:
        reach.append(reach[-1] * p)
    total = 1.0 + sum(reach[1:])
    total += sum(reach[leaf.depth] * leaf.prob for leaf in leaves)
    return total


def expected_tokens_per_cost(spine_probs: Sequence[float], leaves: Sequence[Leaf], *,
                             verify_cost: VerifyCost, draft_cost: float,
                             n_pending: int = 1, tree_overhead: float = 0.0) -> float:
    """Expected tokens per plain step's worth of time of a round of this shape (a chain:
    no ``leaves``); a plain step is worth 1.0. ``auto`` compares sources with it.
    ``tree_overhead``: what a tree round costs beyond its verify pass (plain steps)."""
    nodes = len(spine_probs) + len(leaves)
    cost = verify_cost(n_pending + nodes) + draft_cost + (tree_overhead if leaves else 0.0)
    return expected_tokens(spine_probs, leaves) / max(cost, 1e-9)


def candidates(spine: list[int], top_tokens: list[list[int]], top_probs: list[list[float]],
               per_depth: int, scale: Sequence[float] | None = None) -> list[Leaf]:
    """The runner-up tokens at each depth (``top_tokens[d]``, ``top_probs[d]``: the drafter's
    most probable tokens there), at most ``per_depth`` besides the spine's; ``scale[d]``: how
    much the drafter's probabilities are worth at depth ``d``, from measured acceptance."""
    out: list[Leaf] = []
    for d, (toks, probs) in enumerate(zip(top_tokens, top_probs, strict=True)):
        s = scale[d] if scale is not None and d < len(scale) else 1.0
        ranked = sorted(zip(toks, probs, strict=True), key=lambda tp: tp[1], reverse=True)
        picked = [(t, p) for t, p in ranked if t != spine[d] and p > 0][:per_depth]
        out.extend(Leaf(d, t, min(p * s, 1.0)) for t, p in picked)
    return out


def shape(spine_probs: Sequence[float], pool: Sequence[Leaf], *, verify_cost: VerifyCost,
          draft_cost: float, max_nodes: int, n_pending: int = 1,
          tree_overhead: float = 0.0) -> list[Leaf]:
    """The leaves worth adding to a spine: most valuable first, while the expected tokens per
    cost grows and the tree stays within ``max_nodes`` (none: the chain is best)."""
    reach = [1.0]
    for p in spine_probs:
        reach.append(reach[-1] * p)
    ranked = sorted(pool, key=lambda leaf: reach[leaf.depth] * leaf.prob, reverse=True)
    chain = expected_tokens_per_cost(spine_probs, [], verify_cost=verify_cost,
                                     draft_cost=draft_cost, n_pending=n_pending)
    best, best_n = chain, 0
    chosen: list[Leaf] = []
    for leaf in ranked:  # the first leaf pays the tree's overhead: look past it
        if len(spine_probs) + len(chosen) + 1 > max_nodes:
            break
        chosen.append(leaf)
        value = expected_tokens_per_cost(spine_probs, chosen, verify_cost=verify_cost,
                                         draft_cost=draft_cost, n_pending=n_pending,
                                         tree_overhead=tree_overhead)
        if value > best:
            best, best_n = value, len(chosen)
    return chosen[:best_n]


def with_leaves(spine: Proposal, leaves: Sequence[Leaf]) -> Proposal:
    """The spine then its extra leaves as one tree (``Proposal.spine`` = the spine's length).
    The tree is deterministic (``q`` dropped): the walk rule verifies it exactly."""
    k = spine.k
    ordered = sorted(leaves, key=lambda leaf: leaf.depth)
    parents = (*range(-1, k - 1), *(leaf.depth - 1 for leaf in ordered))
    tokens = mx.concatenate([spine.tokens.astype(mx.uint32),
                             mx.array([leaf.token for leaf in ordered], dtype=mx.uint32)])
    return Proposal(tokens=tokens, q=None, draft_ms=spine.draft_ms, parents=parents, spine=k)


MAX_PATIENCE = 16  # a budget that keeps finding chains looks again after at most this many


class NodeBudget:
    """Chooses each round's shape beside the width policy: the chain, or the chain with the
    leaves that pay (``shape``), from the verify cost by node count and the drafter's
    distribution.

    Looking costs: the drafter's distribution over the whole vocabulary is read at each depth.
    Where trees rarely pay (a processor whose verify cost grows with every node) a ``patient``
    budget that found no leaf worth adding lets the next round pass as a chain unread, twice
    as many each time it finds none again (up to ``MAX_PATIENCE``), and looks every round
    again once a tree paid: chains then cost what they cost with trees off."""

    def __init__(self, cost_at: Callable[[int, int], float], *, max_nodes: int = 16,
                 per_depth: int = 3, tree_overhead: float = 0.0, second_pass: bool = False,
                 patient: bool = False):
        """``cost_at(n, context)``: a verify pass over ``n`` tokens after ``context`` cached
        ones, in plain steps (``Calibration.verify_cost``); ``tree_overhead``: what a tree
        round costs beyond it (the top-k read, the mask, the gather), in plain steps;
        ``second_pass``: the target verifies trees path by path and then feeds the pending
        tokens and the kept path again, priced by ``cost_at`` (at most the chain's length)."""
        self.cost_at = cost_at
        self.tree_overhead = tree_overhead
        self.second_pass = second_pass
        self.max_nodes = max_nodes
        self.per_depth = per_depth
        self.trees = 0  # rounds sent as trees
        self.chains = 0
        self.patient = patient
        self.idle = 0  # rounds still passed as chains unread
        self.wait = 1  # rounds passed unread after the next look that finds no leaf

    def grow(self, proposal: Proposal, rates: Sequence[float] | None = None, *,
             context: int = 0, draft_cost: float = 0.0, n_pending: int = 1,
             marginals: bool = False) -> Proposal:
        """``proposal`` with the leaves that pay (itself when none does). ``rates``: the
        measured acceptance per depth (the drafter's own probabilities are scaled to it);
        ``draft_cost``: what drafting the chain cost, in plain steps. ``marginals``: the
        drafter's per-node distributions do not depend on the nodes before (DFlash), so a
        deterministic chain grows into DDTree's best-first tree, branching at any depth.
        A tree the drafter shaped itself (``Proposal.reach``) keeps the nodes that pay."""
        if proposal.reach is not None and proposal.parents is not None:
            return self._trimmed(proposal, proposal.reach, context=context,
                                 draft_cost=draft_cost, n_pending=n_pending)
        if proposal.dist is None or proposal.k == 0 or not proposal.is_chain:
            return proposal
        if self.idle > 0:
            self.idle -= 1
            self.chains += 1
            return proposal
        grown = self._grown(proposal, rates, context=context, draft_cost=draft_cost,
                            n_pending=n_pending, marginals=marginals)
        if grown is proposal and self.patient:
            self.idle, self.wait = self.wait, min(self.wait * 2, MAX_PATIENCE)
        elif grown is not proposal:
            self.wait = 1
        return grown

    def _grown(self, proposal: Proposal, rates: Sequence[float] | None, *, context: int,
               draft_cost: float, n_pending: int, marginals: bool) -> Proposal:
        assert proposal.dist is not None  # (grow passes only chains with a distribution)
        overhead = self.tree_overhead + (self.cost_at(n_pending + proposal.k, context)
                                         if self.second_pass else 0.0)
        dist = proposal.dist.astype(mx.float32)
        top = mx.argpartition(-dist, kth=self.per_depth, axis=-1)[:, : self.per_depth + 1]
        top_p = mx.take_along_axis(dist, top, axis=-1)
        own_p = mx.take_along_axis(dist, proposal.tokens.astype(mx.int32)[:, None], axis=-1)
        mx.eval(proposal.tokens, top, top_p, own_p)
        spine = int_rows(proposal.tokens[None])[0]
        own = float_rows(own_p.T)[0]
        scale = ([min(r / max(o, 1e-6), 1.0) for r, o in zip(rates, own, strict=False)]
                 if rates is not None else None)
        spine_probs = [min(o * (scale[d] if scale and d < len(scale) else 1.0), 0.999)
                       for d, o in enumerate(own)]
        if marginals and proposal.q is None:
            return self._best_first(proposal, spine, int_rows(top), float_rows(top_p), scale,
                                    context=context, draft_cost=draft_cost, n_pending=n_pending,
                                    overhead=overhead)
        pool = candidates(spine, int_rows(top), float_rows(top_p), self.per_depth, scale)
        leaves = shape(spine_probs, pool, verify_cost=lambda n: self.cost_at(n, context),
                       draft_cost=draft_cost, max_nodes=self.max_nodes,
                       n_pending=n_pending, tree_overhead=overhead)
        if not leaves:
            self.chains += 1
            return proposal
        self.trees += 1
        return with_leaves(proposal, leaves)


    def _trimmed(self, proposal: Proposal, reach: Sequence[float], *, context: int,
                 draft_cost: float, n_pending: int) -> Proposal:
        spine = proposal.spine or proposal.k
        overhead = self.tree_overhead + (self.cost_at(n_pending + spine, context)
                                         if self.second_pass else 0.0)
        n = best_size(reach[: max(self.max_nodes, spine)], lambda m: self.cost_at(m, context),
                      draft_cost=draft_cost, n_pending=n_pending, at_least=spine, chain=spine,
                      tree_overhead=overhead)
        if n <= spine:
            self.chains += 1
            return Proposal(tokens=proposal.tokens[:spine], draft_ms=proposal.draft_ms)
        assert proposal.parents is not None
        self.trees += 1
        return Proposal(tokens=proposal.tokens[:n], draft_ms=proposal.draft_ms,
                        parents=proposal.parents[:n], spine=spine)

    def _best_first(self, proposal: Proposal, spine: list[int], top: list[list[int]],
                    top_p: list[list[float]], scale: Sequence[float] | None, *, context: int,
                    draft_cost: float, n_pending: int, overhead: float) -> Proposal:
        ranked_t: list[list[int]] = []
        ranked_p: list[list[float]] = []
        for d, (toks, ps) in enumerate(zip(top, top_p, strict=True)):
            s = scale[d] if scale is not None and d < len(scale) else 1.0
            pairs = sorted(zip(toks, ps, strict=True), key=lambda tp: tp[1], reverse=True)
            # the chain's own token first (it is the argmax: a deterministic drafter's pick)
            pairs.sort(key=lambda tp: tp[0] != spine[d])
            ranked_t.append([t for t, _ in pairs])
            ranked_p.append([min(p * s, 0.999) for _, p in pairs])
        tokens, parents, values = best_first(ranked_t, ranked_p, self.max_nodes)
        n = best_size(values, lambda m: self.cost_at(m, context), draft_cost=draft_cost,
                      n_pending=n_pending, at_least=1, chain=proposal.k,
                      tree_overhead=overhead)
        if n <= proposal.k:
            self.chains += 1
            return proposal
        self.trees += 1
        return Proposal(tokens=mx.array(tokens[:n], dtype=mx.uint32), draft_ms=proposal.draft_ms,
                        parents=tuple(parents[:n]), spine=proposal.k)


# what a tree round costs beyond its verify pass, in plain steps (an estimate): reading the
# drafter's top candidates (a sync before the pass), the mask and rotary wrappers, the K/V
# gather. Targets verified path by path also feed the kept path again after the batched
# pass: that pass is priced from the calibration table (``NodeBudget(second_pass=True)``).
ONE_PASS_OVERHEAD = 0.25


def second_pass(target: Any, cache: list[Any]) -> bool:
    """Whether ``target`` verifies trees path by path, feeding the kept path again after."""
    from app.engine import rollback, tree_pass

    return not (tree_pass.method(target.model, cache) == tree_pass.ONE_PASS
                and rollback.for_target(target).method == rollback.TRIM)


def linear_cost(slope: float) -> Callable[[int, int], float]:
    """A verify cost growing ``slope`` plain steps per extra token (the width policy's model)."""
    return lambda n, _ctx: 1.0 if n <= 1 else 1.0 + slope * (n - 1)


def flat_cost(nodes: int = 64) -> Callable[[int, int], float]:
    """A verify that costs one step up to ``nodes`` tokens (a GPU's flat region)."""
    return lambda n, _ctx: 1.0 if n <= nodes else n / nodes


# -- trees from per-position marginals (DDTree's best-first, Medusa's candidate trees) -------


def best_first(top_tokens: list[list[int]], top_probs: list[list[float]],
               max_nodes: int) -> tuple[list[int], list[int], list[float]]:
    """The ``max_nodes`` most probable prefixes under independent per-depth distributions
    (``top_tokens[d]``/``top_probs[d]``: depth ``d``'s candidates, most probable first), as a
    tree: (tokens, parents, each node's prefix probability). The top-1 chain comes first, so
    it is the tree's spine; the rest follow in descending probability (parents first)."""
    import heapq

    depth_n = len(top_tokens)
    if depth_n == 0 or max_nodes <= 0:
        return [], [], []
    # the spine: rank 0 at every depth
    tokens: list[int] = []
    parents: list[int] = []
    values: list[float] = []
    index: dict[tuple[int, ...], int] = {}
    v = 1.0
    for d in range(min(depth_n, max_nodes)):
        v *= top_probs[d][0]
        index[(0,) * (d + 1)] = len(tokens)
        parents.append(len(tokens) - 1)
        tokens.append(top_tokens[d][0])
        values.append(v)
    # then best-first over prefixes: a popped prefix pushes its first child and next sibling
    heap: list[tuple[float, tuple[int, ...]]] = []

    def push(ranks: tuple[int, ...]) -> None:
        d = len(ranks) - 1
        if d >= depth_n or ranks[-1] >= len(top_tokens[d]):
            return
        parent_v = values[index[ranks[:-1]]] if d else 1.0
        heapq.heappush(heap, (-parent_v * top_probs[d][ranks[-1]], ranks))

    for d in range(len(values)):
        push((0,) * d + (1,))
    while heap and len(tokens) < max_nodes:
        neg, ranks = heapq.heappop(heap)
        if ranks in index or ranks[:-1] not in index:
            continue
        index[ranks] = len(tokens)
        parents.append(index[ranks[:-1]] if len(ranks) > 1 else -1)
        tokens.append(top_tokens[len(ranks) - 1][ranks[-1]])
        values.append(-neg)
        push(ranks + (0,))
        push(ranks[:-1] + (ranks[-1] + 1,))
    return tokens, parents, values


def best_size(values: Sequence[float], verify_cost: VerifyCost, *, draft_cost: float = 0.0,
              n_pending: int = 1, at_least: int = 1, chain: int | None = None,
              tree_overhead: float = 0.0) -> int:
    """How many of a best-first tree's nodes to verify: the prefix with the most expected
    tokens per cost (each node adds its prefix probability to the expected tokens); past the
    first ``chain`` nodes (a chain) a round also pays ``tree_overhead``."""
    best_n, best_v, total = at_least, -1.0, 1.0
    for n, v in enumerate(values, start=1):
        total += v
        if n < at_least:
            continue
        extra = tree_overhead if chain is not None and n > chain else 0.0
        value = total / max(verify_cost(n_pending + n) + draft_cost + extra, 1e-9)
        if value > best_v:
            best_n, best_v = n, value
    return best_n
