"""A request's lease on the prompt cache, passed to the round loop explicitly.

The lease says which cache the target reads into and how much of the prompt it already holds
(``cache_n``), where reading must pause so a snapshot can be taken (``boundary``), and which
target rows to keep beside the drafter's (``taps``). The loop calls its hooks: ``prompt_read``
(at the boundary and when the whole prompt is in the cache), ``rows`` (the positions each
pass added), ``memory`` (each memory sample) and ``done`` (when the reply ends).

``Lease`` keeps nothing (a fresh cache, every prompt token read); ``app.engine.reuse`` has the
lease of a kept conversation.
"""

from __future__ import annotations

from typing import Any

from app.engine.events import MemorySample
from app.engine.taps import Hidden, TapRequest


class Lease:
    cache_n = 0  # prompt tokens the cache already holds
    boundary: int | None = None  # a prompt length where a prefill chunk must end
    taps: TapRequest | None = None  # target rows kept beside the drafter's

    def __init__(self, cache: list[Any]):
        self.cache = cache

    def prompt_read(self, n: int) -> None:
        """The cache holds the prompt's first ``n`` tokens (the boundary, or all of it)."""

    def rows(self, hidden: Hidden | None) -> None:
        """The target rows of the positions a pass added to the cache."""

    def memory(self, sample: MemorySample) -> MemorySample:
        return sample

    def done(self, committed: list[int], *, failed: bool) -> None:
        """The reply ended; the cache holds a prefix of ``committed`` (prompt + output),
        perhaps followed by tokens fed but not kept. ``failed``: it may hold half a pass."""


def union(a: TapRequest | None, b: TapRequest | None) -> TapRequest | None:
    """Both requests' rows in one (None when neither asks for any)."""
    parts = [t for t in (a, b) if t is not None and not t.empty]
    if not parts:
        return None
    return TapRequest(final_prenorm=any(t.final_prenorm for t in parts),
                      final_postnorm=any(t.final_postnorm for t in parts),
                      layers=tuple(sorted({i for t in parts for i in t.layers})),
                      shared_kv=any(t.shared_kv for t in parts))
