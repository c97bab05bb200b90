"""One request's lease on a kept conversation: what it takes out, and what it puts back.

``ConversationLease(...)`` finds the kept conversation sharing the longest prefix with the
prompt and gives the round loop a cache that already holds it (``cache_n`` tokens the target
does not read again). The drafter continues from its own state where it keeps one (a draft
model's cache: ``Drafter.resume``), or rebuilds it from the target rows the conversation kept
for every held position (MTP heads, DFlash: ``Drafter.resume_rows``), so switching kind or
two turns of a hidden-state drafter in a row read only the new tokens. Through the loop's
hooks it marks turn boundaries (snapshots for caches that cannot trim), keeps the rows of
every pass, adds its size to memory samples and relieves the store under memory pressure;
when the reply ends it keeps only what is known to be in the caches and puts the
conversation back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.engine.drafters.base import Drafter
from app.engine.events import MemorySample
from app.engine.lease import Lease, union
from app.engine.models import LoadedModel
from app.engine.prompt_cache import (
    CachedState,
    Conversation,
    KeptRows,
    PromptCache,
    Reuse,
    signature,
)
from app.engine.taps import Hidden, TapRequest


def model_key(target: LoadedModel, fresh_cache: list[Any]) -> tuple[Any, ...]:
    return (str(target.path), id(target.model), signature(fresh_cache))


def _reads_rows(drafter: Drafter | None) -> TapRequest | None:
    taps = drafter.taps if drafter is not None else None
    return taps if taps is not None and not taps.empty else None


class ConversationLease(Lease):
    def __init__(self, store: PromptCache, target: LoadedModel, prompt: list[int],
                 fresh_cache: list[Any], drafter: Drafter | None = None, width: int = 0,
                 conversation: str | None = None, keep_taps: TapRequest | None = None):
        """``keep_taps``: rows to keep for drafters that may read this conversation later."""
        self.store = store
        self.prompt = list(prompt)
        self.key = model_key(target, fresh_cache)
        self.drafter = drafter
        self.conversation = conversation
        needs = _reads_rows(drafter)
        self.taps = union(needs, keep_taps)
        self.draft_key = (drafter.state_key(width)
                          if drafter is not None and drafter.keeps_state else None)
        reuse = store.take(self.key, self.prompt, self.draft_key, conversation)
        conv = reuse.conversation
        kept = conv.rows if conv is not None else None
        if conv is not None and needs is not None and (kept is None or not kept.covers(needs)):
            conv, reuse, kept = None, Reuse(None), None  # nothing to rebuild it from: read all
        self.cache_n = reuse.cache_n
        self.state = conv.target if conv is not None else CachedState([], fresh_cache)
        super().__init__(self.state.cache)  # (rewinds change its entries, never the list)
        if needs is not None and drafter is not None and kept is not None:
            drafter.resume_rows(kept.hidden(self.cache_n))  # (``take`` rewound them with it)
        if drafter is not None and reuse.draft is not None:
            drafter.resume(reuse.draft)
        # the rows go on with the conversation while they cover what is kept from now on
        self.kept_rows: KeptRows | None = None
        if self.taps is not None:
            if conv is None:
                self.kept_rows = KeptRows(self.taps)
            elif kept is not None and kept.covers(self.taps):
                self.kept_rows = kept
        self.draft_state: CachedState | None = None
        if self.state.needs_snapshots:  # a regenerated reply can reuse the whole prompt
            self.boundary = len(self.prompt) - 1

    # -- hooks ---------------------------------------------------------------------------
    def prompt_read(self, n: int) -> None:
        self.state.tokens = self.prompt[:n]
        self.state.snapshot()
        if n == len(self.prompt) and self.draft_key is not None and self.drafter is not None:
            self.draft_state = self.drafter.kept_state()
            if self.draft_state is not None:
                self.draft_state.snapshot()

    def rows(self, hidden: Hidden | None) -> None:
        if self.kept_rows is not None and not self.kept_rows.append(hidden):
            self.kept_rows = None

    def memory(self, sample: MemorySample) -> MemorySample:
        self.store.relieve(sample.system_used_fraction, sample.pressure)
        rows = self.kept_rows.nbytes() if self.kept_rows is not None else 0
        return dataclasses.replace(
            sample, prompt_cache_bytes=self.store.nbytes + self.state.nbytes() + rows)

    def done(self, committed: list[int], *, failed: bool) -> None:
        if failed or not self.state.tokens:
            return  # the caches may hold half a pass, or the prompt was never read
        if self.state.settle(committed) == 0:
            return
        self.state.snapshot()
        rows = self.kept_rows
        if rows is not None and rows.rewind(self.state.n):
            rows.compact()
        else:
            rows = None
        conv = Conversation(self.key, self.state, key=self.conversation, rows=rows)
        if self.draft_state is not None and self.draft_key is not None:
            if self.draft_state.settle(self.draft_state.tokens) > 0:
                conv.drafters[self.draft_key] = self.draft_state
        self.store.put(conv)
