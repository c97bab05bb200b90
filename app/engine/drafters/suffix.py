"""Suffix decoding: propose what followed the current text where it was seen before, in this
request's prompt and output or in replies kept from earlier requests of the same scope.

Two indexes are asked each round (``app.engine.suffix_index``): this request's own text, and
the scope's kept replies (``app.engine.suffix_memory``: one chat, or one API key on the
server); the continuation with the higher expected acceptance is proposed, as long as the
match allows (a long match speculates far). Proposals are deterministic, so they are verified
by greedy match or sample-match and stay exact at any temperature. The pause-after-misses
policy is prompt lookup's (this drafter is prompt lookup with a different look-up): after
rounds with nothing accepted it stays quiet until a look-up would have been right.

Where the request lets rounds be trees (``--trees on|flat``), the occurrences' other
continuations join the chain as a tree (``app.engine.suffix_tree``: at a branch point the
less frequent continuations too, each followed along its own occurrences), and the round's
budget keeps the nodes that pay; the tree is deterministic, verified by the same walk rule.
A round that accepted a path off the chain counts, for the width and the pause, as deep as
that path went.

When the request ends its reply is kept in the scope's store. Figures must say whether a store
was warm: a kept reply makes a repeat look fast and says nothing about a first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx

from app.engine.drafters.base import Proposal
from app.engine.drafters.prompt_lookup import PromptLookupDrafter
from app.engine.events import SamplingParams
from app.engine.suffix_index import NOTHING, SuffixIndex
from app.engine.suffix_memory import SuffixMemory
from app.engine.suffix_tree import ContinuationTree

MAX_NODES = 24  # a tree's nodes at most, before the round's budget keeps what pays


class SuffixLookup:
    """Prompt lookup's index interface (``extend``, ``lookup``) over both suffix indexes."""

    def __init__(self, memory: SuffixMemory | None, scope: str | None, *, factor: float,
                 min_prob: float):
        self.memory = memory
        self.scope = scope
        self.factor = factor
        self.min_prob = min_prob
        self.own = SuffixIndex()
        self.seq_id = self.own.add(())
        self.from_kept = 0  # look-ups answered from the kept replies
        self.from_own = 0
        self.chosen: SuffixIndex | None = None  # the index the last look-up answered from

    @property
    def tokens(self) -> Sequence[int]:
        return self.own.seqs[self.seq_id]

    def extend(self, tokens: Sequence[int]) -> None:
        self.own.extend(self.seq_id, tokens)

    def lookup(self, k: int) -> tuple[list[int], int]:
        """The best continuation (up to ``k`` tokens) and the length of its match."""
        context = self.tokens
        own = self.own.speculate(context, k, factor=self.factor, min_prob=self.min_prob)
        kept_index = (self.memory.index(self.scope)
                      if self.memory is not None and self.scope is not None else None)
        kept = (kept_index.speculate(context, k, factor=self.factor, min_prob=self.min_prob)
                if kept_index is not None else NOTHING)
        best = kept if kept.score > own.score else own
        self.chosen = None
        if best.tokens:
            if best is kept:
                self.from_kept += 1
                self.chosen = kept_index
            else:
                self.from_own += 1
                self.chosen = self.own
        return list(best.tokens), best.match

    def tree(self, k: int, spine: int) -> ContinuationTree | None:
        """The last look-up's continuation (its first ``spine`` tokens) with the others seen
        after the same match, paths at most ``k`` tokens long (None: no look-up found any)."""
        if self.chosen is None:
            return None
        return self.chosen.speculate_tree(self.tokens, k, spine=spine, max_nodes=MAX_NODES,
                                          factor=self.factor, min_prob=self.min_prob)


def _depth(tree: ContinuationTree, tokens: Sequence[int]) -> int:
    """How many of ``tokens`` follow a path of ``tree`` from its root (a node's children
    carry distinct tokens: the path is unique)."""
    node, n = -1, 0
    for tok in tokens:
        nxt = next((i for i, p in enumerate(tree.parents) if p == node and tree.tokens[i] == tok),
                   None)
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n


class SuffixDrafter(PromptLookupDrafter):
    def __init__(
        self,
        *,
        memory: SuffixMemory | None = None,
        scope: str | None = None,
        seed_replies: Sequence[Sequence[int]] = (),
        factor: float = 1.0,
        min_prob: float = 0.1,
        adaptive: bool = True,
    ):
        self.memory = memory
        self.scope = scope
        self.seed_replies = [list(r) for r in seed_replies]
        self.factor = factor
        self.min_prob = min_prob
        # every match is at least a pair, and the match already bounds the width: "go wide"
        super().__init__(ngram_min=2, ngram_max=2, adaptive=adaptive)

    def _reset(self) -> None:
        super()._reset()
        # the round loop's committed text (it grows in place): read at close, it holds the
        # last step's tokens too, which the loop does not hand to ``observe``
        self._committed: list[int] | None = None
        self.index = SuffixLookup(self.memory, self.scope, factor=self.factor,  # type: ignore[assignment]
                                  min_prob=self.min_prob)
        self.prompt_len = 0
        self._tree: ContinuationTree | None = None  # the last round's tree, until observed

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        out = super().begin(prompt, sampling)
        self.prompt_len = len(prompt)
        if self.memory is not None and self.scope is not None:
            for reply in self.seed_replies:  # a chat's earlier replies (after a restart)
                self.memory.remember(self.scope, reply)
        return out

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        self._committed = committed
        self._tree = None
        chain = super().propose(committed, k)
        if chain is None or not self.tree_candidates:
            return chain
        index: SuffixLookup = self.index  # type: ignore[assignment]
        tree = index.tree(k, chain.k)
        if tree is None or tree.spine != chain.k or len(tree.tokens) <= chain.k:
            return chain
        self._tree = tree
        return Proposal(tokens=mx.array(tree.tokens, dtype=mx.uint32), parents=tree.parents,
                        spine=tree.spine, reach=tree.reach, draft_ms=chain.draft_ms,
                        match=chain.match)

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Any = None) -> None:
        self._committed = committed
        tree, self._tree = self._tree, None
        if proposal is not None and tree is not None:
            accepted = max(accepted, min(_depth(tree, new_tokens[:-1]), proposal.k))
        super().observe(committed, proposal, accepted, new_tokens, hidden)

    def close(self) -> None:
        """Keep this request's reply for the scope's later requests."""
        if self.memory is not None and self.scope is not None:
            text = self._committed if self._committed is not None else self.index.tokens
            self.memory.remember(self.scope, list(text)[self.prompt_len:])

    def stats(self) -> dict[str, Any]:
        index: SuffixLookup = self.index  # type: ignore[assignment]
        return {**super().stats(), "lookups_from_kept_replies": index.from_kept,
                "lookups_from_this_request": index.from_own}
