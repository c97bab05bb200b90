"""An MTP head replayed over a known token sequence, teacher-forced.

One target pass over the whole sequence gives every position's state; one head pass pairs
each state with the token that follows it, as the drafter does round by round. The result
says how good the head is on that text, apart from anything the round loop does:

- ``agreement``: how often the head's first proposal equals the sequence's next-but-one
  token over every position of a reply;
- ``replay_width1``: the accept/reject outcome of every round a greedy engine runs at width
  one over that reply, in order (a greedy reply is the target's own choice at each position,
  so the rounds the engine runs are fixed by the head's predictions alone).

A greedy engine at width one must accept exactly what the replay says; the demo's evaluation
prints the agreement beside the engine's acceptance, so a low speedup can be told apart
into a weak head or a loop that loses what the head got right.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from app.engine import taps as tp
from app.engine.drafters.mtp_head import POSTNORM, BoundHead, MTPHead
from app.engine.mlx_types import int_list


def head_predictions(target_model: Any, head: MTPHead, tokens: list[int]) -> list[int]:
    """``pred[p]``: the head's first proposal for ``tokens[p + 2]`` given ``tokens[:p + 2]``
    (the target's state at ``p`` and the token at ``p + 1``), for ``p`` in
    ``0 .. len(tokens) - 3``."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    if len(tokens) < 3:
        return []
    post = head.hidden_state == POSTNORM
    _, hidden = tp.forward(target_model, mx.array(tokens, dtype=mx.uint32),
                           make_prompt_cache(target_model),
                           tp.TapRequest(final_postnorm=post, final_prenorm=not post))
    rows = None if hidden is None else hidden.final_postnorm if post else hidden.final_prenorm
    if rows is None:
        raise RuntimeError("the target pass returned no hidden states for the head")
    bound = BoundHead(head, target_model)
    cache = [KVCache() for _ in head.module.layers]
    logits, _ = bound.step(mx.array(tokens[1:-1], dtype=mx.uint32), rows[:-2], cache)
    pred = bound.to_target_ids(mx.argmax(logits, axis=-1))
    return int_list(pred)


def agreement(pred: list[int], tokens: list[int], start: int) -> tuple[int, int]:
    """(matches, positions) of the first proposal over ``tokens[start:]`` (a reply after a
    prompt of ``start`` tokens; ``start >= 2``)."""
    hits = sum(int(pred[j - 2] == tokens[j]) for j in range(start, len(tokens)))
    return hits, max(len(tokens) - start, 0)


def replay_width1(pred: list[int], tokens: list[int], start: int) -> list[int]:
    """Accepted count (0 or 1) of each width-one round a greedy engine runs over the reply
    ``tokens[start:]``: a round proposes the token after the newest committed one (the
    first round, the reply's first token); accepted, it commits it plus the target's bonus
    token, rejected, the target's own token. The engine skips the round whose proposal
    could not fit in its token budget, so its rounds are a prefix of these."""
    out = []
    committed = start
    while committed < len(tokens):
        ok = pred[committed - 2] == tokens[committed]
        out.append(int(ok))
        committed += 2 if ok else 1
    return out
