"""Acceptance rules that walk a tree proposal (DESIGN.md "Trees and several sources").

``rows`` holds the target's processed logits: row 0 is the distribution for the committed
text's children, row ``1 + i`` the one after node ``i``.

- Deterministic trees (greedy, or sample-match: proposals not drawn from ``q``): draw the
  target's token at every node once, walk from the root following the child that carries the
  drawn token, stop where none does and emit the drawn token. Exact for the reason
  sample-match is: each step's token is a draw from ``p`` at the path so far.
- Stochastic trees (children drawn i.i.d. from ``q``, rule "rejection"): SpecInfer's
  multi-draft recursive rejection. Try the children in order and accept child ``x`` with
  probability ``min(1, p(x)/q(x))``; after a rejection ``p <- norm(max(0, p - q))``; when every
  child is rejected, draw from what is left of ``p``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from app.engine import sampling as sm
from app.engine import tree
from app.engine.events import RULE_REJECTION, SamplingParams
from app.engine.mlx_types import int_list, item_int
from app.engine.proposal import Proposal
from app.engine.verify import Verdict


def verify_tree(rows: mx.array, proposal: Proposal, *, sampling: SamplingParams,
                rule: str, start: int | None = None) -> Verdict:
    """``start``: the sequence position of row 0 (a node at depth ``d`` predicts the token at
    ``start + d``; shared draws read that position's noise)."""
    assert proposal.parents is not None
    parents = proposal.parents
    mx.eval(proposal.tokens)
    toks = int_list(proposal.tokens)
    kids = tree.children(parents)
    if rule == RULE_REJECTION and proposal.q is not None:
        return _rejection_walk(rows, proposal.q, toks, kids, sampling)
    positions = (None if start is None
                 else [start, *(start + d for d in tree.depths(parents))])
    drawn = sm.sample(rows, sampling, positions)
    mx.eval(drawn)
    target = int_list(drawn)
    path: list[int] = []
    node = -1
    while True:
        want = target[node + 1]
        nxt = next((c for c in kids[node] if toks[c] == want), None)
        if nxt is None:
            return Verdict(len(path), want, tuple(toks), tuple(path))
        path.append(nxt)
        node = nxt


def _rejection_walk(rows: mx.array, q: mx.array, toks: list[int], kids: dict[int, list[int]],
                    sampling: SamplingParams) -> Verdict:
    path: list[int] = []
    node = -1
    while True:
        p_row = sm.probabilities(rows[node + 1 : node + 2], sampling)[0].astype(mx.float32)
        mx.eval(p_row)
        p = np.array(p_row, dtype=np.float64)
        chosen = None
        for c in kids[node]:
            qc = np.array(q[c].astype(mx.float32), dtype=np.float64)
            x = toks[c]
            u = float(np.asarray(mx.random.uniform()))
            ok = u * qc[x] < p[x] if qc[x] > 0 else p[x] > 0
            if ok:
                chosen = c
                break
            residual = np.maximum(p - qc, 0.0)
            mass = residual.sum()
            if mass > 0:  # (p == q exactly: a rejection had probability 0)
                p = residual / mass
        if chosen is None:
            logp = mx.log(mx.array(p.astype(np.float32)))
            token = item_int(mx.random.categorical(logp))
            return Verdict(len(path), token, tuple(toks), tuple(path))
        path.append(chosen)
        node = chosen
