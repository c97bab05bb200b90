"""Where the current text has been seen before, and what most often came next.

The index behind suffix decoding (SuffixDecoding, Oliaro et al. 2024): earlier token sequences
(this request's prompt and output, or replies kept from earlier requests) and, for every pair
of consecutive tokens, where it occurred. A query takes the end of the current text, finds the
earlier occurrences of its longest matching suffix (up to ``max_match`` tokens) and walks their
continuations, following the most frequent next token while its share among the occurrences
stays at or above ``min_prob`` (``speculate_tree`` keeps the runner-up continuations too). How far it goes follows the match: at most ``factor`` tokens
per matched token, so a long match (a file being rewritten) speculates far and a two-token
coincidence speculates little.

Plain Python, no MLX: the work is a few dictionary look-ups per round, bounded by
``max_occurrences`` (the most recent occurrences of a pair are the ones looked at).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.engine import suffix_tree
from app.engine.suffix_tree import ContinuationTree, Occurrences

SEED = 2  # tokens a match must share at least (one pair, the index's key)
_POS_BITS = 32  # an occurrence is packed as seq_id << 32 | end


@dataclass(frozen=True)
class Speculation:
    tokens: tuple[int, ...]
    probs: tuple[float, ...]  # share of the occurrences that continued with each token
    match: int  # length of the matched suffix
    occurrences: int  # how many earlier occurrences the first token was counted over

    @property
    def score(self) -> float:
        """Expected number of accepted tokens if each share were the chance of acceptance."""
        total, run = 0.0, 1.0
        for p in self.probs:
            run *= p
            total += run
        return total


NOTHING = Speculation((), (), 0, 0)


class SuffixIndex:
    """Sequences and, per token pair, the positions right after it (most recent last)."""

    # what a stored token and a distinct pair cost in CPython (array slot; packed position and
    # its list slot; the pair's tuple, list and dict entry), checked against tracemalloc in
    # the tests: the memory cap counts with these
    BYTES_PER_TOKEN = 48
    BYTES_PER_PAIR = 260

    def __init__(self, *, max_match: int = 32, max_occurrences: int = 64):
        self.max_match = max_match
        self.max_occurrences = max_occurrences
        self.seqs: dict[int, array[int]] = {}
        self.pairs: dict[tuple[int, int], list[int]] = {}
        self._next_id = 0
        self.n_tokens = 0

    # -- building -----------------------------------------------------------------------
    def add(self, tokens: Iterable[int]) -> int:
        """Store a new sequence; returns its id."""
        seq_id = self._next_id
        self._next_id += 1
        self.seqs[seq_id] = array("l")
        self.extend(seq_id, tokens)
        return seq_id

    def extend(self, seq_id: int, tokens: Iterable[int]) -> None:
        """Append tokens to a stored sequence (the current request's text as it grows)."""
        seq = self.seqs[seq_id]
        base = seq_id << _POS_BITS
        for tok in tokens:
            seq.append(int(tok))
            n = len(seq)
            self.n_tokens += 1
            if n >= SEED:
                self.pairs.setdefault((seq[n - 2], seq[n - 1]), []).append(base | n)

    def remove(self, seq_id: int) -> None:
        """Forget a sequence and every position that points into it."""
        seq = self.seqs.pop(seq_id, None)
        if seq is None:
            return
        self.n_tokens -= len(seq)
        for i in range(1, len(seq)):
            key = (seq[i - 1], seq[i])
            positions = self.pairs.get(key)
            if positions is None:
                continue
            kept = [p for p in positions if p >> _POS_BITS != seq_id]
            if kept:
                self.pairs[key] = kept
            else:
                del self.pairs[key]

    @property
    def approx_bytes(self) -> int:
        return self.n_tokens * self.BYTES_PER_TOKEN + len(self.pairs) * self.BYTES_PER_PAIR

    # -- querying -----------------------------------------------------------------------
    def speculate(
        self, context: Sequence[int], max_tokens: int, *, factor: float = 1.0,
        min_prob: float = 0.1,
    ) -> Speculation:
        """The most likely continuation of ``context`` seen in the stored sequences."""
        return self._search(context, max_tokens, factor, min_prob)[0]

    def speculate_tree(
        self, context: Sequence[int], max_tokens: int, *, spine: int, max_nodes: int,
        factor: float = 1.0, min_prob: float = 0.1, branches: int = 3,
    ) -> ContinuationTree:
        """``speculate``'s continuation (its first ``spine`` tokens) and the other
        continuations of the same occurrences, as a tree (``app.engine.suffix_tree``)."""
        spec, group, limit = self._search(context, max_tokens, factor, min_prob)
        return suffix_tree.build(group, spec.tokens[:spine], limit=limit, min_prob=min_prob,
                                 max_nodes=max_nodes, branches=branches)

    def _search(self, context: Sequence[int], max_tokens: int, factor: float, min_prob: float,
                ) -> tuple[Speculation, Occurrences, int]:
        """The best continuation, the occurrences it was counted over and its length limit."""
        if max_tokens <= 0 or len(context) < SEED:
            return NOTHING, [], 0
        positions = self.pairs.get((context[-2], context[-1]))
        if not positions:
            return NOTHING, [], 0
        found: list[tuple[array[int], int, int]] = []  # (sequence, end of the match, match length)
        for packed in positions[-self.max_occurrences:]:
            seq = self.seqs[packed >> _POS_BITS]
            end = packed & ((1 << _POS_BITS) - 1)
            if end >= len(seq):
                continue  # nothing after it (the end of the text being queried, say)
            found.append((seq, end, self._match(seq, end, context)))
        if not found:
            return NOTHING, [], 0
        best: tuple[Speculation, Occurrences, int] = (NOTHING, [], 0)
        # the longest match first; a shorter one only where its wider evidence scores higher
        for length in sorted({m for _, _, m in found}, reverse=True)[:3]:
            group = [(seq, end) for seq, end, m in found if m >= length]
            limit = min(max_tokens, max(1, math.floor(factor * length)))
            spec = self._walk(group, limit, min_prob, length)
            if spec.score > best[0].score:
                best = (spec, group, limit)
        return best

    def _match(self, seq: array[int], end: int, context: Sequence[int]) -> int:
        """How many tokens before ``end`` in ``seq`` equal the end of ``context``."""
        n = SEED
        limit = min(self.max_match, end, len(context))
        while n < limit and seq[end - n - 1] == context[-n - 1]:
            n += 1
        return n

    @staticmethod
    def _walk(
        group: list[tuple[array[int], int]], limit: int, min_prob: float, match: int
    ) -> Speculation:
        tokens: list[int] = []
        probs: list[float] = []
        active = group
        first_n = 0
        for step in range(limit):
            counts: dict[int, int] = {}
            for seq, end in active:
                if end + step < len(seq):
                    tok = seq[end + step]
                    counts[tok] = counts.get(tok, 0) + 1
            total = sum(counts.values())
            if not total:
                break
            tok, count = max(counts.items(), key=lambda kv: kv[1])
            prob = count / total
            if prob < min_prob:
                break
            if step == 0:
                first_n = total
            tokens.append(tok)
            probs.append(prob)
            active = [(seq, end) for seq, end in active
                      if end + step < len(seq) and seq[end + step] == tok]
        return Speculation(tuple(tokens), tuple(probs), match, first_n)
