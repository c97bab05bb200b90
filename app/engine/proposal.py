"""A round's proposal: the seam between where proposals come from and how they are checked.

The verify step, the target's rollback and the hidden-state taps take a ``Proposal`` as a
whole (never a bare array of tokens), so a proposal shape other than a chain (a tree of
continuations) changes those three places and nothing between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx


@dataclass
class Proposal:
    """What a round verifies, taken as a whole by the verify step, the rollback and the taps.

    Nodes ``0..k-1`` with their tokens; ``parents[i]`` is the node node ``i`` follows (``-1``:
    the committed text). ``parents=None`` is a chain (node ``i`` follows node ``i - 1``), the
    only shape the engine verifies today; a tree sets ``parents`` and its verify step returns
    the accepted path as node indices (``Verdict.path``).
    """

    tokens: mx.array  # (k,) uint32, one per node; may still be lazy
    q: mx.array | None = None  # (k, V_target) probabilities, stochastic drafters only
    draft_ms: float = 0.0  # host time spent building the proposal
    parents: tuple[int, ...] | None = None  # None: a chain
    # (k, V_target) the drafter's own probabilities per node, kept when trees are grown from it
    dist: mx.array | None = None
    spine: int | None = None  # a tree grown from a chain: nodes 0..spine-1 are that chain
    # a tree the drafter shaped itself (``Drafter.tree_candidates``): each node's chance of
    # being on the accepted path, as the drafter estimates it; the round's budget keeps the
    # first nodes that pay (nodes past the spine are listed most probable first)
    reach: tuple[float, ...] | None = None
    # a copy (prompt lookup, suffix decoding): how many tokens before it agree with the text
    # it was copied from (0: not a copy)
    match: int = 0

    def drafted(self, path: tuple[int, ...] | None, accepted: int) -> tuple[Proposal, int]:
        """What the drafter proposed and how much of it was accepted: a tree grown from the
        drafter's chain (``spine``) reports that chain and the part of the path on it."""
        if self.spine is None or path is None:
            return self, accepted
        n = 0
        while n < len(path) and path[n] == n and n < self.spine:
            n += 1
        chain = Proposal(tokens=self.tokens[: self.spine], draft_ms=self.draft_ms)
        return chain, n

    @property
    def k(self) -> int:
        """Nodes proposed (a chain: its length)."""
        return int(self.tokens.shape[0])

    @property
    def is_chain(self) -> bool:
        return self.parents is None or all(p == i - 1 for i, p in enumerate(self.parents))

    def depth(self) -> int:
        """Tokens on the longest path (a chain: ``k``)."""
        if self.parents is None:
            return self.k
        depths: list[int] = []
        for p in self.parents:
            depths.append(1 if p < 0 else depths[p] + 1)
        return max(depths, default=0)

    def path_tokens(self, path: tuple[int, ...], tokens: tuple[int, ...]) -> list[int]:
        """The host tokens of the nodes on ``path`` (``tokens``: every node's, as host ints)."""
        return [tokens[i] for i in path]
