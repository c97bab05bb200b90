"""Rewinding the target's cache after a verify pass kept only part of what it fed.

One strategy per cache kind, chosen when the target loads (``for_target``):

- KV caches (``KVCache``, ``QuantizedKVCache``...): trim.
- Sliding-window caches (``RotatingKVCache``): trim, exact past the window. A multi-token
  update keeps ``window - 1 + fed`` entries in temporal order, so every token a rejected
  proposal displaced is still there; the rejected tail is sliced off (and, when a whole pass
  was rejected, one empty slot is put in front so the next single-token write lands where
  mlx-lm's ring expects it).
- Recurrent state (``ArraysCache``: Gated DeltaNet, Mamba-2, Mamba) of the families
  ``app.engine.recurrent`` covers: rebuilt from what the verify pass recorded (conv input,
  the per-step states or the recurrence inputs and the state going in).
- Any other recurrent family (RWKV-7, LFM2, Falcon-H1...): the recurrent entries are
  snapshotted before the verify pass; on a partial acceptance they are restored, the KV
  entries trimmed by the whole pass, and the kept tokens fed again (one extra target pass).

When every fed position is kept nothing is rewound. A cache kind none of these handles gets
a plain reason naming it (``problem``); the pairing check asks ``config_problem``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    ChunkedKVCache,
    ConcatenateKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)

from app.checkpoints.rewind_rules import config_problem, reason  # noqa: F401 - one verdict
from app.engine import recurrent, tree_pass
from app.engine.mlx_types import flat_arrays
from app.engine.proposal import Proposal
from app.errors import DraftPairError

TRIMMED = (KVCache, QuantizedKVCache, ConcatenateKVCache, ChunkedKVCache)

TRIM, WINDOW, CAPTURE, REPLAY = "trim", "trim (sliding window)", "recurrent capture", "replay"


def leaves(cache: list[Any]) -> list[Any]:
    out: list[Any] = []
    for c in cache:
        out.extend(leaves(list(c.caches)) if isinstance(c, CacheList) else [c])
    return out


def cache_arrays(cache: list[Any]) -> list[mx.array]:
    """Every array a cache holds (to evaluate it), whatever its kind."""
    return [a for _, a in flat_arrays([c.state for c in leaves(cache)])]


def problem(cache: list[Any]) -> str | None:
    """Why this cache cannot be rewound (None if it can)."""
    unknown = sorted({type(c).__name__ for c in leaves(cache)
                      if not isinstance(c, (*TRIMMED, RotatingKVCache, ArraysCache))})
    return reason(unknown) if unknown else None


def _trim_window(c: RotatingKVCache, n: int, fed: int) -> None:
    c.trim(n)
    if fed <= 1 or c.keys is None:
        return  # a single-token write only overwrote the slot it evicts anyway
    # after a multi-token update the buffer is in temporal order: drop the rejected tail
    c.keys = c.keys[..., : c._idx, :]
    c.values = c.values[..., : c._idx, :]
    if c.offset >= c.max_size and c._idx < c.max_size:
        pad = c.max_size - c._idx  # 1: the whole pass was rejected
        keep = c.keep

        def padded(a: mx.array) -> mx.array:
            z = mx.zeros((*a.shape[:2], pad, a.shape[3]), a.dtype)
            return mx.concatenate([a[..., :keep, :], z, a[..., keep:, :]], axis=2)

        c.keys, c.values = padded(c.keys), padded(c.values)
        c._idx = c.max_size


def _rewind_ring(c: RotatingKVCache, n: int) -> None:
    if c.keys is None:
        return
    if c.keys.shape[2] > c.max_size:  # temporal order after a multi-token update
        _trim_window(c, n, fed=2)
        return
    n = min(n, c.offset)
    c.offset -= n
    idx = c._idx - n
    if idx < c.keep and c.offset >= c.max_size - c.keep:  # step back across the ring's start
        idx += c.max_size - c.keep
    c._idx = max(idx, 0)


def widen_windows(cache: list[Any], extra: int) -> list[Any]:
    """Give every sliding-window cache ``extra`` slots past its window (the mask keeps the
    window), so rewinding up to ``extra`` single-token writes loses nothing."""
    for c in leaves(cache):
        if isinstance(c, RotatingKVCache) and c.keys is None:
            c.max_size += extra
    return cache


def _trim(cache: list[Any], n: int, fed: int) -> None:
    if n <= 0:
        return
    for c in leaves(cache):
        if isinstance(c, RotatingKVCache):
            _trim_window(c, n, fed)
        elif not isinstance(c, ArraysCache):
            c.trim(n)


def mark_cache(cache: list[Any], length: int) -> None:
    """Remember the recurrent state of a drafter's cache at ``length`` positions, so that
    ``rewind_cache`` can return to it (a no-op for KV caches, which simply trim)."""
    for c in leaves(cache):
        if isinstance(c, ArraysCache):
            c.__dict__.setdefault("_marks", {})[length] = list(c.cache)


def rewind_cache(cache: list[Any], length: int) -> None:
    """Rewind a drafter's own cache so it holds the first ``length`` positions.

    KV caches trim; recurrent entries return to the state ``mark_cache`` kept at ``length``
    (older marks are dropped); sliding-window caches step their ring back, which is exact
    when the cache has at least as many extra slots as positions rewound
    (``widen_windows``)."""
    for c in leaves(cache):
        if isinstance(c, ArraysCache):
            marks = c.__dict__.get("_marks", {})
            if length not in marks:
                raise DraftPairError(
                    "A drafter's recurrent cache cannot be rewound to a length it did not mark.")
            c.cache = list(marks[length])
            c.__dict__["_marks"] = {length: marks[length]}
        elif isinstance(c, RotatingKVCache):
            n = int(c.offset) - length
            if n > 0:
                _rewind_ring(c, n)
        elif isinstance(c, TRIMMED):
            n = int(c.offset) - length
            if n > 0:
                c.trim(n)  # type: ignore[no-untyped-call]  # mlx-lm's caches are not annotated
        else:
            raise DraftPairError(
                f"A drafter cache of type {type(c).__name__} cannot be rewound.")


class Rollback:
    """The rewind strategy for one target model."""

    def __init__(self, model: Any, cache: list[Any], *, method: str | None = None):
        """``method``: force ``REPLAY`` on a recurrent target (to measure it)."""
        self.model = model
        self.problem = problem(cache)
        n_states = sum(isinstance(c, ArraysCache) for c in leaves(cache))
        if self.problem is not None:
            self.method = "none"
        elif n_states == 0:
            self.method = WINDOW if any(isinstance(c, RotatingKVCache)
                                        for c in leaves(cache)) else TRIM
        elif method == REPLAY:
            self.method = REPLAY
        else:
            self.method = CAPTURE if recurrent.install(model, n_states) else REPLAY
        self._rec: recurrent.Recording | None = None
        self._snap: list[list[Any]] | None = None

    @contextmanager
    def verifying(self, cache: list[Any]) -> Iterator[None]:
        """Wrap the verify pass: records (capture) or snapshots (replay) what a rewind needs."""
        if self.method in (CAPTURE, REPLAY):  # (capture keeps the snapshot as a fallback)
            self._snap = [list(c.cache) for c in leaves(cache) if isinstance(c, ArraysCache)]
        if self.method == CAPTURE:
            self._rec = recurrent.start()
            try:
                yield
            finally:
                recurrent.stop()
        else:
            yield

    def keep(self, cache: list[Any], fed: mx.array, n_pending: int, proposal: Proposal,
             path: tuple[int, ...]) -> None:
        """A verify pass fed the ``n_pending`` pending tokens then ``proposal``'s nodes; keep
        the pending tokens and the nodes on the accepted ``path``."""
        if not proposal.is_chain:
            assert self.method == TRIM, "one-pass trees run on plain KV caches only"
            self._rec = self._snap = None
            tree_pass.keep_path(cache, n_pending, proposal.k, path)
            return
        self.rewind(cache, fed, keep=n_pending + len(path))

    def rewind(self, cache: list[Any], tokens: mx.array, keep: int) -> None:
        """The verify pass fed ``tokens``; keep the cache for the first ``keep`` of them."""
        fed = int(tokens.shape[0])
        rec, snap = self._rec, self._snap
        self._rec = self._snap = None
        if keep >= fed:
            return
        if self.method in (TRIM, WINDOW):
            _trim(cache, fed - keep, fed)
            return
        states = [c for c in leaves(cache) if isinstance(c, ArraysCache)]
        if self.method == CAPTURE:
            assert rec is not None
            try:
                rebuilt = recurrent.rebuild(states, rec, fed, keep)
            except RuntimeError:  # the pass did not record as this family should: replay
                self.method = REPLAY
            else:
                _trim(cache, fed - keep, fed)
                mx.eval(rebuilt)
                return
        if self.method != REPLAY or snap is None:
            raise DraftPairError(f"Speculation cannot run: {self.problem}.")
        for c, saved in zip(states, snap, strict=True):
            c.cache = saved
        _trim(cache, fed, fed)
        if keep:
            self.model(tokens[:keep][None], cache=cache)
            mx.eval([a for c in states for a in c.cache if a is not None])


def for_target(loaded: Any) -> Rollback:
    """The strategy of a loaded target (chosen once, kept with it)."""
    rb: Rollback | None = loaded.extra.get("rollback")
    if rb is None:
        from mlx_lm.models.cache import make_prompt_cache

        rb = Rollback(loaded.model, make_prompt_cache(loaded.model))
        loaded.extra["rollback"] = rb
    return rb
