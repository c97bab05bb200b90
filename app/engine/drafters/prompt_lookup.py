"""Prompt lookup: propose the tokens that followed the latest earlier occurrence of the
sequence's last n-gram (n from ``ngram_max`` down to ``ngram_min``), in prompt + output.

Adaptive policy: after ``pause_after`` rounds in a row with nothing accepted the drafter stops
proposing (the target decodes plainly, at full speed); it keeps looking up silently and resumes
as soon as a lookup would have predicted the token the target then produced. The proposal width
follows recent acceptance: it grows while everything is accepted and shrinks to what was.
State is per request (``begin`` resets it): a table that persisted across requests would make
repeats look fast and lie about first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import mlx.core as mx

from app.engine.drafters.base import Drafter
from app.engine.events import SamplingParams
from app.engine.proposal import Proposal
from app.engine.taps import Hidden

if TYPE_CHECKING:
    from app.engine.drafter_context import DrafterContext


MAX_MATCH = 32  # a match is measured back at most this far


class NgramIndex:
    """Latest end position of every n-gram (ngram_min..ngram_max) of a growing sequence."""

    def __init__(self, ngram_min: int, ngram_max: int):
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.tokens: list[int] = []
        self.latest: dict[tuple[int, ...], int] = {}

    def extend(self, new_tokens: list[int]) -> None:
        for tok in new_tokens:
            self.tokens.append(tok)
            end = len(self.tokens)
            # register n-grams that end *before* the newest token, so a lookup of the current
            # suffix finds an earlier occurrence, never itself
            for n in range(self.ngram_min, self.ngram_max + 1):
                start = end - 1 - n
                if start < 0:
                    break
                self.latest[tuple(self.tokens[start : end - 1])] = end - 1

    def lookup(self, k: int) -> tuple[list[int], int]:
        """Continuation (up to ``k`` tokens) of the longest matching n-gram, and how far the
        match runs back (its n, and beyond it while the tokens before both agree, at most
        ``MAX_MATCH``): a copy after a long match is right far more often than after a pair."""
        toks = self.tokens
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(toks) < n:
                continue
            end = self.latest.get(tuple(toks[-n:]))
            if end is not None:
                cont = toks[end : end + k]
                if cont:
                    match = n
                    while (match < MAX_MATCH and end - match - 1 >= 0
                           and toks[end - match - 1] == toks[-match - 1]):
                        match += 1
                    return cont, match
        return [], 0


class PromptLookupDrafter(Drafter):
    stochastic = False
    adaptive_width = False  # sizes its proposals from the lookups themselves

    def __init__(
        self,
        *,
        ngram_min: int = 2,
        ngram_max: int = 3,
        adaptive: bool = True,
        pause_after: int = 2,
        start_width: int = 3,
    ):
        if not 1 <= ngram_min <= ngram_max <= 16:
            raise ValueError("n-gram sizes must satisfy 1 <= min <= max <= 16")
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.adaptive = adaptive
        self.pause_after = pause_after
        self.start_width = start_width
        self._reset()

    def _reset(self) -> None:
        self.index = NgramIndex(self.ngram_min, self.ngram_max)
        self.paused = False
        self.misses = 0
        self.width: int | None = None
        self.shadow: list[int] = []  # what a lookup would have proposed while paused
        self.n_pauses = 0
        self.n_resumes = 0

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self._reset()
        self.index.extend(list(prompt))
        return []

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        if k <= 0:
            return None
        cont, match = self.index.lookup(k)
        if self.paused:
            self.shadow = cont
            return None
        if not cont:
            return None
        if self.adaptive:
            # a match of the longest n-gram size is strong evidence of copying: go wide
            width = self.width or (k if match >= self.ngram_max else self.start_width)
            cont = cont[: min(k, width)]
        return Proposal(tokens=mx.array(cont, dtype=mx.uint32), match=match)

    def observe(
        self,
        committed: list[int],
        proposal: Proposal | None,
        accepted: int,
        new_tokens: list[int],
        hidden: Hidden | None = None,
    ) -> None:
        self.index.extend(new_tokens)
        if not self.adaptive:
            return
        if proposal is None:
            if self.paused and self.shadow and new_tokens and new_tokens[0] == self.shadow[0]:
                self.paused = False  # a lookup would have paid: resume
                self.misses = 0
                self.width = None
                self.n_resumes += 1
            self.shadow = []
            return
        k = proposal.k
        if accepted == 0:
            self.misses += 1
            self.width = max(1, (self.width or self.start_width) // 2)
            if self.misses >= self.pause_after:
                self.paused = True
                self.n_pauses += 1
        else:
            self.misses = 0
            self.width = 64 if accepted == k else accepted + 1  # all accepted: go full width

    def stats(self) -> dict[str, Any]:
        return {"pauses": self.n_pauses, "resumes": self.n_resumes}


def make(ctx: DrafterContext) -> PromptLookupDrafter:
    req = ctx.request
    return PromptLookupDrafter(ngram_min=req.ngram_min, ngram_max=req.ngram_max,
                               adaptive=req.adaptive)
