"""Several continuations of a match as one token tree (SuffixDecoding's speculation trees).

Where the text was seen before, the occurrences do not always agree on what came next: at such
a branch point the chain follows the most frequent token and a tree keeps the runner-ups too,
each followed further along its own occurrences. The tree starts with the chain (its *spine*,
exactly what the chain would propose), then adds the other continuations most probable first
(a node's *reach*: the product of the shares along its path, the chance that the text takes
it if the occurrences' shares were the text's odds), parents before children.

Plain Python, no MLX: counting tokens over the match's occurrences (at most the index's
``max_occurrences``) once per node.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

Occurrences = list[tuple["array[int]", int]]  # (sequence, position right after the match)


@dataclass(frozen=True)
class ContinuationTree:
    tokens: tuple[int, ...]
    parents: tuple[int, ...]  # node order: parents first (``-1``: the current text)
    reach: tuple[float, ...]  # each node's share product along its path
    spine: int  # nodes ``0..spine-1``: the most frequent continuation (the chain)


def _next_tokens(active: Occurrences, step: int, min_prob: float,
                 ) -> list[tuple[int, float, Occurrences]]:
    """What came ``step`` tokens after the match in the ``active`` occurrences: each token
    with its share and the occurrences that continued with it, most frequent first (ties:
    the token met first, as the chain's walk picks)."""
    groups: dict[int, Occurrences] = {}
    for seq, end in active:
        if end + step < len(seq):
            groups.setdefault(seq[end + step], []).append((seq, end))
    total = sum(len(g) for g in groups.values())
    if not total:
        return []
    ranked = sorted(groups.items(), key=lambda kv: -len(kv[1]))  # stable: first seen first
    return [(tok, len(g) / total, g) for tok, g in ranked if len(g) / total >= min_prob]


def build(group: Occurrences, spine: Sequence[int], *, limit: int, min_prob: float,
          max_nodes: int, branches: int = 3) -> ContinuationTree:
    """The tree of ``group``'s continuations: ``spine`` first (the chain, a walk of the most
    frequent tokens), then up to ``max_nodes`` nodes in all, each path at most ``limit``
    tokens long, at most ``branches`` children per node."""
    tokens: list[int] = []
    parents: list[int] = []
    reach: list[float] = []
    heap: list[tuple[float, int, int, int, int, Occurrences]] = []
    order = 0  # ties pop in the order they were found

    def push(parent: int, depth: int, r: float, kids: list[tuple[int, float, Occurrences]],
             skip: int | None = None) -> None:
        nonlocal order
        if depth > limit:
            return
        for tok, share, occ in kids[:branches]:
            if tok != skip:
                heapq.heappush(heap, (-r * share, order, parent, depth, tok, occ))
                order += 1

    active, r, node = group, 1.0, -1
    for depth, want in enumerate(spine[: min(limit, max_nodes)], start=1):
        kids = _next_tokens(active, depth - 1, min_prob)
        hit = next((k for k in kids if k[0] == want), None)
        if hit is None:  # not this group's walk: the spine ends here
            break
        push(node, depth, r, kids, skip=want)
        r *= hit[1]
        tokens.append(want)
        parents.append(node)
        reach.append(r)
        node = len(tokens) - 1
        active = hit[2]
    n_spine = len(tokens)
    push(node, n_spine + 1, r, _next_tokens(active, n_spine, min_prob))
    while heap and len(tokens) < max_nodes:
        neg, _, parent, depth, tok, occ = heapq.heappop(heap)
        tokens.append(tok)
        parents.append(parent)
        reach.append(-neg)
        push(len(tokens) - 1, depth + 1, -neg, _next_tokens(occ, depth, min_prob))
    return ContinuationTree(tuple(tokens), tuple(parents), tuple(reach), n_spine)
