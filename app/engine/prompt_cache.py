"""Conversation states kept between requests, so a new turn processes only its new tokens.

A ``CachedState`` is one model cache (a list of mlx-lm cache objects) together with exactly the
token ids it has been fed, plus snapshots where the cache cannot simply be trimmed. The
``PromptCache`` keeps, per target model, a few ``Conversation`` entries (the target's state and
each drafter's), least recently used dropped first when their bytes pass a budget or the
system runs short of memory.

Rewinding to the longest common prefix with a new prompt, per cache kind:

- KV caches (``KVCache``, quantized KV): trim, always exact.
- Sliding-window caches (``RotatingKVCache``): trim while the ring has not wrapped; past the
  window the evicted entries are gone, so the state is restored from a snapshot.
- Recurrent state (``ArraysCache``: Mamba, Gated DeltaNet): a running state cannot go back at
  all; snapshots (copies of the state arrays) are taken at turn boundaries (after the prompt is
  read, and at the end of a reply) and the latest one at or before the common prefix is
  restored; the rest of the prompt is then fed as usual.

Drafters that read the target's hidden states (MTP heads, DFlash) need one target row per
position the cache holds. A ``Conversation`` keeps those rows beside the target's state
(``KeptRows``: the rows every drafter that may run with this target reads), rewound with it,
so such a drafter rebuilds its own state from them at any later turn, whatever kind the
earlier turns used.

A snapshot copies only the layers that cannot trim; in a hybrid model the attention layers of
the same cache are trimmed to the snapshot's length. Entries are taken out of the store while a
request uses them (no copy of the big KV arrays), and put back when it ends.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mlx_lm.models.cache import ConcatenateKVCache, KVCache, QuantizedKVCache

from app.engine.taps import Hidden, TapRequest

# cache kinds whose trim is exact at any length (everything else is snapshotted)
ALWAYS_TRIMMABLE = (KVCache, QuantizedKVCache, ConcatenateKVCache)

DEFAULT_MAX_BYTES = 2 * 2**30  # at most; and at most this share of the machine's memory:
DEFAULT_MEMORY_SHARE = 0.15
MAX_SNAPSHOTS = 6  # per state: the latest turn boundaries
PRESSURE_FRACTION = 0.92  # system memory use at which kept conversations are dropped


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _arrays(obj: Any) -> list[Any]:
    from app.engine.mlx_types import flat_arrays

    state = obj.state if hasattr(obj, "state") else obj
    return [a for _, a in flat_arrays(state)]


def cache_nbytes(cache: list[Any]) -> int:
    return sum(a.nbytes for c in cache for a in _arrays(c))


def held_length(cache: list[Any]) -> int | None:
    """Positions the cache holds, read from its attention layers (None if it has none)."""
    offsets = [int(c.offset) for c in cache if hasattr(c, "offset")]
    return max(offsets) if offsets else None


def signature(cache: list[Any]) -> tuple[Any, ...]:
    """What must match for a kept cache to stand in for a fresh one of the same model."""
    return tuple((type(c).__name__, getattr(c, "max_size", None), getattr(c, "keep", None))
                 for c in cache)


def _trimmable_now(c: Any, n: int) -> bool:
    if n <= 0:
        return True
    if isinstance(c, ALWAYS_TRIMMABLE):
        return True
    # a sliding window trims exactly until it wraps; mlx-lm says so through is_trimmable
    return type(c).__name__ == "RotatingKVCache" and c.is_trimmable() and n <= int(c.offset)


def default_budget() -> int:
    import psutil

    return int(min(DEFAULT_MAX_BYTES, DEFAULT_MEMORY_SHARE * psutil.virtual_memory().total))


@dataclass
class Snapshot:
    length: int
    layers: dict[int, Any]  # index in the cache list -> a deep copy of that layer
    nbytes: int


@dataclass
class CachedState:
    """A cache and exactly the tokens it has been fed."""

    tokens: list[int]
    cache: list[Any]
    snapshots: list[Snapshot] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.tokens)

    @property
    def needs_snapshots(self) -> bool:
        return any(not isinstance(c, ALWAYS_TRIMMABLE) for c in self.cache)

    def nbytes(self) -> int:
        return cache_nbytes(self.cache) + sum(s.nbytes for s in self.snapshots)

    def snapshot(self) -> None:
        """Remember the layers that cannot trim, at the current length (a turn boundary)."""
        if not self.needs_snapshots:
            return
        if self.snapshots and self.snapshots[-1].length == self.n:
            return
        import mlx.core as mx

        layers = {i: copy.deepcopy(c) for i, c in enumerate(self.cache)
                  if not isinstance(c, ALWAYS_TRIMMABLE)}
        arrays = [a for c in layers.values() for a in _arrays(c)]
        mx.eval(arrays)
        self.snapshots = [s for s in self.snapshots if s.length < self.n]
        self.snapshots.append(Snapshot(self.n, layers, sum(a.nbytes for a in arrays)))
        del self.snapshots[:-MAX_SNAPSHOTS]

    def rewind(self, length: int) -> int:
        """Make the cache hold at most the first ``length`` tokens; returns the length reached
        (0: nothing usable is left, start from a fresh cache)."""
        length = max(0, min(length, self.n))
        drop = self.n - length
        if all(_trimmable_now(c, drop) for c in self.cache):
            if drop:
                for c in self.cache:
                    c.trim(drop)
            self.tokens = self.tokens[:length]
            self.snapshots = [s for s in self.snapshots if s.length <= length]
            return length
        usable = [s for s in self.snapshots if s.length <= length]
        return self._restore(usable[-1]) if usable else 0

    def _restore(self, snap: Snapshot) -> int:
        for i, c in enumerate(self.cache):
            if i in snap.layers:  # a copy, so the snapshot stays valid for later rewinds
                self.cache[i] = copy.deepcopy(snap.layers[i])
            else:
                c.trim(int(getattr(c, "offset", snap.length)) - snap.length)
        self.tokens = self.tokens[: snap.length]
        self.snapshots = [s for s in self.snapshots if s.length <= snap.length]
        return snap.length

    def settle(self, known: list[int]) -> int:
        """After a request: the cache holds a prefix of ``known`` (prompt + output) possibly
        followed by tokens that were fed but not kept (an end-of-text token, proposals past a
        stop). Keep only what is known; returns the length kept."""
        held = held_length(self.cache)
        if held is None:  # no attention layer says how far it got: back to a turn boundary
            usable = [s for s in self.snapshots if s.length <= len(known)
                      and known[: s.length] == self.tokens[: s.length]]
            if not usable:
                self.tokens, self.snapshots = [], []
                return 0
            return self._restore(usable[-1])
        if held <= len(known):
            self.tokens = list(known[:held])
            return held
        self.tokens = list(known) + [-1] * (held - len(known))
        return self.rewind(len(known))


class KeptRows:
    """The target's hidden rows (for ``taps``) of every position a kept state holds, in
    order; appended to step by step (a list append: no copy while decoding)."""

    def __init__(self, taps: TapRequest, parts: list[Hidden] | None = None, n: int = 0):
        self.taps = taps
        self.parts: list[Hidden] = list(parts or [])
        self.n = n

    def covers(self, taps: TapRequest | None) -> bool:
        if taps is None or taps.empty:
            return True
        have = self.taps
        return ((have.final_prenorm or not taps.final_prenorm)
                and (have.final_postnorm or not taps.final_postnorm)
                and set(taps.layers) <= set(have.layers))

    def append(self, hidden: Hidden | None) -> bool:
        """Rows of the positions a step added; False if a pass returned none (the rows no
        longer line up with the cache: the caller drops them)."""
        if hidden is None:
            return False
        if hidden.n:
            self.parts.append(hidden.without_kv())  # the cache itself is what is kept
            self.n += hidden.n
        return True

    def hidden(self, upto: int | None = None) -> Hidden:
        """One ``Hidden`` of the first ``upto`` rows (all by default)."""
        whole = Hidden.concat(self.parts)
        self.parts = [whole] if whole.n else []
        return whole if upto is None or upto >= whole.n else whole.rows(0, upto)

    def rewind(self, length: int) -> bool:
        """Keep the first ``length`` rows; False when fewer are held."""
        if length > self.n:
            return False
        if length < self.n:
            self.parts = [self.hidden(length)] if length else []
            self.n = length
        return True

    def compact(self) -> None:
        """One array per tap, evaluated (at the end of a request)."""
        import mlx.core as mx

        whole = self.hidden()
        mx.eval(whole.arrays())

    def fork(self) -> KeptRows:
        return KeptRows(self.taps, self.parts, self.n)

    def nbytes(self) -> int:
        return sum(a.nbytes for p in self.parts for a in p.arrays())


@dataclass
class Conversation:
    """What one conversation keeps: the target's state and each drafter's (by drafter key)."""

    model_key: tuple[Any, ...]
    target: CachedState
    drafters: dict[str, CachedState] = field(default_factory=dict)
    key: str | None = None  # the conversation it belongs to (None: keyed by tokens only)
    rows: KeptRows | None = None  # the target's rows of every position ``target`` holds

    def nbytes(self) -> int:
        rows = self.rows.nbytes() if self.rows is not None else 0
        return self.target.nbytes() + sum(d.nbytes() for d in self.drafters.values()) + rows

    def fork(self) -> Conversation:
        """An independent copy (the snapshots are never written to, so they are shared)."""
        def dup(s: CachedState) -> CachedState:
            return CachedState(list(s.tokens), copy.deepcopy(s.cache), list(s.snapshots))

        return Conversation(self.model_key, dup(self.target),
                            {k: dup(v) for k, v in self.drafters.items()}, self.key,
                            self.rows.fork() if self.rows is not None else None)


@dataclass
class Reuse:
    """What a request got back from the store."""

    conversation: Conversation | None  # None: nothing reusable, fresh caches
    cache_n: int = 0  # prompt tokens the target does not process again
    draft: CachedState | None = None  # the drafter's state, rewound (None: begin afresh)


class PromptCache:
    """Kept conversation states, least recently used dropped first beyond ``max_bytes``."""

    def __init__(self, max_bytes: int | None = None, max_entries: int = 8):
        self.max_bytes = default_budget() if max_bytes is None else max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[int, Conversation] = OrderedDict()
        self._ids = 0
        self.dropped_for_pressure = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes() for e in self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def take(self, model_key: tuple[Any, ...], prompt: list[int], draft_key: str | None = None,
             conversation: str | None = None) -> Reuse:
        """The kept state sharing the longest prefix with ``prompt``, rewound there (at least
        one prompt token is always left to feed).

        The entry of the same ``conversation`` is taken out and rewound in place (an edit or
        a regeneration replaces what followed). Any other entry is taken out when the prompt
        keeps at least half of it (the next turn of a chat sent without a key); when the prompt
        shares less (another chat with the same system prompt) it is copied, so the original
        stays usable."""
        best, best_n = None, 0
        for eid, entry in self._entries.items():
            if entry.model_key != model_key:
                continue
            n = common_prefix(entry.target.tokens, prompt)
            own = conversation is not None and entry.key == conversation
            if own or n > best_n:
                best, best_n = eid, n
            if own:
                break
        if best is None or best_n == 0:
            return Reuse(None)
        entry = self._entries[best]
        limit = min(best_n, len(prompt) - 1)
        own = conversation is not None and entry.key == conversation
        if own or 2 * limit >= entry.target.n:
            del self._entries[best]
        else:
            entry = entry.fork()
        entry.key = conversation
        reached = entry.target.rewind(limit)
        if reached == 0:
            return Reuse(None)
        if entry.rows is not None and not entry.rows.rewind(reached):
            entry.rows = None
        draft = entry.drafters.pop(draft_key, None) if draft_key else None
        entry.drafters.clear()  # other drafters' states would go stale: drop them
        if draft is not None:
            got = draft.rewind(min(common_prefix(draft.tokens, prompt), len(prompt) - 1))
            draft = draft if got > 0 else None
        return Reuse(entry, reached, draft)

    def put(self, entry: Conversation) -> None:
        if entry.target.n == 0:
            return
        if entry.key is not None:  # one state per conversation: the newest
            for eid in [i for i, e in self._entries.items() if e.key == entry.key]:
                del self._entries[eid]
        self._ids += 1
        self._entries[self._ids] = entry
        self._fit()

    def _fit(self) -> None:
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        while self._entries and self.nbytes > self.max_bytes:
            self._entries.popitem(last=False)

    def relieve(self, system_used_fraction: float, pressure: str | None = None) -> int:
        """Drop kept conversations when the system runs short of memory; returns how many."""
        if pressure not in ("warn", "critical") and system_used_fraction < PRESSURE_FRACTION:
            return 0
        keep = 0 if pressure == "critical" or system_used_fraction >= 0.97 else 1
        dropped = 0
        while len(self._entries) > keep:
            self._entries.popitem(last=False)
            dropped += 1
        self.dropped_for_pressure += dropped
        return dropped
