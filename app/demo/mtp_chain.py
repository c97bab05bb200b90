"""Teacher-forced passes of an MTP head for its first and its chained proposal, in parallel.

At decode time the head's first proposal for the position after pair ``i`` (token
``t_{i+1}``, target state ``h_i``) is ``t_{i+2}``. A second proposal chains: the head reads
that token and *its own* output state in place of the target's, as a speculative entry at
position ``i + 1`` that attends to the pairs ``0..i`` in its cache and to itself, and predicts
``t_{i+3}``. Trained on the first step only, a head has never seen its own state as input, and
chained proposals are rarely accepted.

``two_step`` computes both steps for every position of a batch in two passes of the module:
the first is the ordinary causal pass (its keys and values kept), the second feeds every
``(t_{i+2}, state_i)`` at rope positions ``1..L`` with a mask that lets row ``i`` see the
first pass's entries ``0..i`` and its own entry only, which is exactly what the decode loop's
cache holds when it chains. Tested against the decode loop itself (``BoundHead.step`` with a
real KV cache) on random weights.
"""

from __future__ import annotations

import mlx.core as mx

from app.engine.drafters.mtp_head import MTPModule


class _PassCache:
    """Stands in for a KV cache during one teacher-forced pass: sets the rope offset, keeps
    the keys and values the layer hands it, and returns them after an earlier pass's."""

    def __init__(self, offset: int, before: tuple[mx.array, mx.array] | None = None):
        self.offset = offset
        self.before = before
        self.kv: tuple[mx.array, mx.array] | None = None

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        self.kv = (keys, values)
        if self.before is None:
            return keys, values
        bk, bv = self.before
        return mx.concatenate([bk, keys], axis=2), mx.concatenate([bv, values], axis=2)


def chain_mask(length: int) -> mx.array:
    """(L, 2L) boolean: row ``i`` sees first-pass entries ``0..i`` and its own chained entry."""
    idx = mx.arange(length)
    first = idx[None, :] <= idx[:, None]
    own = idx[None, :] == idx[:, None]
    return mx.concatenate([first, own], axis=1)


def two_step(module: MTPModule, emb1: mx.array, hidden: mx.array, emb2: mx.array,
             chain_state) -> tuple[mx.array, mx.array]:
    """Post-norm states of the first and the chained step for every position.

    ``emb1``: embeddings of ``t_{i+1}``; ``hidden``: the target states ``h_i``; ``emb2``:
    embeddings of ``t_{i+2}`` (the first proposal, taken as accepted); all (B, L, H).
    ``chain_state(pre, post)`` picks the head's own state that stands in for the target's.
    """
    if len(module.layers) != 1:
        raise ValueError("chained training supports heads of one layer")
    first = _PassCache(0)
    pre1, post1 = module(emb1, hidden, cache=[first], mask="causal")
    second = _PassCache(1, before=first.kv)
    _, post2 = module(emb2, chain_state(pre1, post1), cache=[second],
                      mask=chain_mask(emb1.shape[1]))
    return post1, post2
