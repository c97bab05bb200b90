"""One request's use of the prompt cache: what it takes out, and what it puts back.

``Turn(...)`` finds the kept conversation sharing the longest prefix with the prompt and hands
the round loop a cache that already holds it (``cache_n`` tokens the target does not read
again) and, for a drafter with its own model cache, that cache rewound the same way.
``Turn.run(loop)`` passes the loop's events through; when the prompt has been read it marks a
turn boundary (snapshots for caches that cannot trim), adds the store's size to memory samples
and relieves the store under memory pressure; when the loop ends it keeps only what is known
to be in the caches (prompt + output) and puts the conversation back.

Drafters that read the target's hidden states need one row per cached position, which a reused
cache no longer has: requests with such a drafter start fresh (reuse is off for them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from app.engine.events import Event, MemoryEvent, PrefillEvent, StatusEvent
from app.engine.prompt_cache import CachedState, Conversation, PromptCache, Reuse, signature


def model_key(target: Any, fresh_cache: list[Any]) -> tuple:
    return (str(target.path), id(target.model), signature(fresh_cache))


def draft_key(drafter: Any, width: int) -> str | None:
    """Key of a drafter whose own cache can be kept (None: nothing to keep)."""
    if drafter is None or getattr(drafter, "cache", "absent") == "absent":
        return None
    model = getattr(getattr(drafter, "draft", None), "path", "")
    return f"{drafter.kind}:{model}:{width}"


def reusable(drafter: Any) -> bool:
    taps = getattr(drafter, "taps", None)
    return taps is None or bool(getattr(taps, "empty", False))


class Turn:
    def __init__(self, store: PromptCache | None, target: Any, prompt: list[int],
                 fresh_cache: list[Any], drafter: Any = None, width: int = 0,
                 conversation: str | None = None):
        self.store = store if store is not None and reusable(drafter) else None
        self.prompt = list(prompt)
        self.key = model_key(target, fresh_cache)
        self.draft_key = draft_key(drafter, width)
        self.drafter = drafter
        self.conversation = conversation
        self.reuse = (self.store.take(self.key, self.prompt, self.draft_key, conversation)
                      if self.store is not None else Reuse(None))
        conv = self.reuse.conversation
        self.state = conv.target if conv is not None else CachedState([], fresh_cache)
        self.draft_state: CachedState | None = None
        if drafter is not None and self.reuse.draft is not None:
            drafter.resume = self.reuse.draft  # begin() continues from it (see FullModelDrafter)

    @property
    def cache(self) -> list[Any]:
        return self.state.cache

    @property
    def cache_n(self) -> int:
        return self.reuse.cache_n

    def prepare(self, loop: Any) -> Any:
        """Set up ``loop`` so a regenerated reply can reuse the whole prompt: caches that only
        rewind to snapshots get one just before the prompt's last token."""
        if self.store is not None and self.state.needs_snapshots:
            loop.boundary = len(self.prompt) - 1
        return loop

    def _prompt_read(self, loop: Any) -> None:
        self.state.tokens = self.prompt[: getattr(loop, "prefilled", len(self.prompt))]
        self.state.snapshot()
        cache = getattr(self.drafter, "cache", None) if self.draft_key else None
        if cache is not None:
            n = len(self.prompt) - 1  # a full-model drafter holds the prompt but its last token
            self.draft_state = CachedState(self.prompt[:n], cache)
            self.draft_state.snapshot()

    def run(self, loop: Any) -> Iterator[Event]:
        failed = False
        try:
            for ev in loop.run():
                if isinstance(ev, StatusEvent) and ev.stage == "decoding":
                    self._prompt_read(loop)
                elif isinstance(ev, PrefillEvent) and loop.prefilled == loop.boundary:
                    self.state.tokens = self.prompt[: loop.prefilled]
                    self.state.snapshot()
                elif isinstance(ev, MemoryEvent) and self.store is not None:
                    s = ev.sample
                    self.store.relieve(s.system_used_fraction, s.pressure)
                    ev = MemoryEvent(dataclasses.replace(
                        s, prompt_cache_bytes=self.store.nbytes + self.state.nbytes()))
                yield ev
        except Exception:
            failed = True  # the caches may hold half a pass: keep nothing
            raise
        finally:
            if not failed:
                self._keep(loop)

    def _keep(self, loop: Any) -> None:
        if self.store is None or not self.state.tokens:
            return  # reuse off, or the prompt was never read
        committed = list(getattr(loop, "committed", self.prompt))
        if self.state.settle(committed) == 0:
            return
        self.state.snapshot()
        conv = Conversation(self.key, self.state, key=self.conversation)
        if self.draft_state is not None and self.draft_key is not None:
            if self.draft_state.settle(self.draft_state.tokens) > 0:
                conv.drafters[self.draft_key] = self.draft_state
        self.store.put(conv)
