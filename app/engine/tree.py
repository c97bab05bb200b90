"""Token trees: the shape of a tree proposal and the attention it needs.

A tree's nodes are listed parents first; ``parents[i]`` is the node node ``i`` follows (``-1``:
the committed text). A verify pass feeds the ``n_pending`` pending tokens, then the nodes in
that order; a node attends to the committed text, the pending tokens and its own ancestors,
and sits at the position its depth gives (committed length + depth - 1), as if its path had
been fed alone.
"""

from __future__ import annotations

import mlx.core as mx


def depths(parents: tuple[int, ...]) -> list[int]:
    """Each node's depth (a child of the committed text: 1)."""
    out: list[int] = []
    for i, p in enumerate(parents):
        if p >= i:
            raise ValueError("a tree lists every node after its parent")
        out.append(1 if p < 0 else out[p] + 1)
    return out


def children(parents: tuple[int, ...]) -> dict[int, list[int]]:
    """Each node's children in order (``-1``: the committed text's)."""
    out: dict[int, list[int]] = {-1: []}
    for i, p in enumerate(parents):
        out.setdefault(p, []).append(i)
        out.setdefault(i, [])
    return out


def ancestors(parents: tuple[int, ...], i: int) -> list[int]:
    """The nodes from the root down to ``i`` (inclusive)."""
    path: list[int] = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


def leaves(parents: tuple[int, ...]) -> list[int]:
    ch = children(parents)
    return [i for i in range(len(parents)) if not ch[i]]


def rel_positions(parents: tuple[int, ...], n_pending: int) -> list[int]:
    """Positions of the fed tokens, counted from the first one fed."""
    return [*range(n_pending), *(n_pending + d - 1 for d in depths(parents))]


def attention_mask(parents: tuple[int, ...], n_pending: int, offset: int) -> mx.array:
    """``(n, offset + n)`` booleans: which cached or fed position each fed token sees."""
    n = n_pending + len(parents)
    rows: list[list[bool]] = []
    for j in range(n):
        row = [False] * n
        if j < n_pending:
            for c in range(j + 1):
                row[c] = True
        else:
            for c in range(n_pending):
                row[c] = True
            for a in ancestors(parents, j - n_pending):
                row[n_pending + a] = True
        rows.append(row)
    fed = mx.array(rows, dtype=mx.bool_)
    if not offset:
        return fed
    return mx.concatenate([mx.ones((n, offset), dtype=mx.bool_), fed], axis=1)
