"""Acceptance rules (DESIGN.md "Acceptance rules"). All three are exact.

Each rule receives the target's ``k+1`` processed logits rows (row ``i`` is the distribution
for proposal ``i``; row ``k`` is the bonus position) and the ``k`` proposals, builds one lazy
graph and synchronises once. The result is how many proposals were accepted and the token the
target contributes (the correction at the first rejection, or the bonus).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.events import (
    RULE_GREEDY,
    RULE_REJECTION,
    RULE_SAMPLE_MATCH,
    SamplingParams,
)
from app.engine.mlx_types import bool_list, int_list, item_int
from app.engine.proposal import Proposal


@dataclass(frozen=True)
class Verdict:
    accepted: int
    token: int  # the target's own token after the accepted path
    proposals: tuple[int, ...]  # every node's token as host ints
    nodes: tuple[int, ...] | None = None  # the accepted path's nodes (None: a chain's first)

    @property
    def path(self) -> tuple[int, ...]:
        """Indices of the accepted nodes, root first (a chain: ``0..accepted-1``)."""
        return self.nodes if self.nodes is not None else tuple(range(self.accepted))

    @property
    def kept(self) -> list[int]:
        """The accepted tokens and the target's own one: what the round commits."""
        return [*(self.proposals[i] for i in self.path), self.token]


def choose_rule(sampling: SamplingParams, stochastic_draft: bool) -> str:
    """Greedy at temperature 0; with shared draws every drafter proposes with the noise the
    target draws with, so its proposals are checked as fixed tokens (sample-match)."""
    if sampling.greedy:
        return RULE_GREEDY
    if stochastic_draft and not sm.shares_draws(sampling):
        return RULE_REJECTION
    return RULE_SAMPLE_MATCH


def _first_mismatch(proposals: list[int], target: list[int]) -> int:
    n = 0
    for d, t in zip(proposals, target, strict=False):
        if d != t:
            break
        n += 1
    return n


def verify(rows: mx.array, proposal: Proposal, *, sampling: SamplingParams,
           rule: str, start: int | None = None) -> Verdict:
    """Apply ``rule`` to ``rows`` (``(k+1, V)``, processed) and a chain ``proposal``;
    ``start``: the sequence position of row 0 (shared draws read its noise)."""
    if not proposal.is_chain:
        raise NotImplementedError("tree proposals need a tree verify pass")
    return verify_chain(rows, proposal.tokens, sampling=sampling, rule=rule, q=proposal.q,
                        start=start)


def verify_chain(
    rows: mx.array,
    proposals: mx.array,
    *,
    sampling: SamplingParams,
    rule: str,
    q: mx.array | None = None,
    start: int | None = None,
) -> Verdict:
    """Apply ``rule`` to ``rows`` (``(k+1, V)``, processed) and ``proposals`` (``(k,)``)."""
    k = proposals.shape[0]
    if rule in (RULE_GREEDY, RULE_SAMPLE_MATCH):
        # Greedy: argmax per row. Sample-match: draw t_i ~ p_i independently per row (with
        # the noise of its position under shared draws); for proposals fixed before the draw,
        # accepting while t_i == y_i is exact and acceptance-optimal. Under shared draws the
        # committed tokens are the draws themselves, the tokens plain decoding draws.
        positions = None if start is None else sm.positions_from(start, k + 1)
        target = sm.sample(rows, sampling, positions)
        target_l, props_l = _to_lists(target, proposals)
        n = _first_mismatch(props_l, target_l)
        return Verdict(n, target_l[n], tuple(props_l))
    if rule != RULE_REJECTION or q is None:
        raise ValueError(f"rule {rule!r} needs draft probabilities")
    p = sm.probabilities(rows, sampling)  # (k+1, V)
    idx = mx.arange(k)
    py = p[idx, proposals]
    qy = q[idx, proposals]
    u = mx.random.uniform(shape=(k,))
    # accept with probability min(1, p/q); q(y) > 0 for a sampled y, guard anyway
    accept = mx.where(qy > 0, u * qy < py, py > 0)
    residual = mx.maximum(p[:k] - q, 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    # where p == q exactly the residual is empty and rejection has probability 0; use p
    residual = mx.where(mass > 0, residual, p[:k])
    corrections = mx.random.categorical(mx.log(residual))
    bonus = mx.random.categorical(mx.log(p[k : k + 1]))
    mx.eval(accept, corrections, bonus, proposals)
    acc_l = bool_list(accept)
    n = 0
    while n < k and acc_l[n]:
        n += 1
    token = item_int(corrections[n]) if n < k else item_int(bonus[0])
    return Verdict(n, token, tuple(int_list(proposals)))


def _to_lists(target: mx.array, proposals: mx.array) -> tuple[list[int], list[int]]:
    mx.eval(target, proposals)
    return int_list(target), int_list(proposals)
