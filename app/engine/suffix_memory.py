"""Replies kept for suffix decoding, one store per scope, within a memory cap.

A scope is whoever may see the text: one chat in the app, one API key (and, when the client
names one, one conversation under that key) on the server. A drafter only ever reads its own
scope's store, so one key's text can never be proposed to another key. Scopes are kept in
least-recently-used order; past the cap the oldest replies of the least recently used scope
go first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.suffix_index import SuffixIndex

DEFAULT_CAP_BYTES = 64 * 2**20
MAX_REPLY_TOKENS = 32_768  # a longer reply is kept by its end only


@dataclass(frozen=True)
class MemoryStats:
    scopes: int
    replies: int
    tokens: int
    bytes: int
    cap_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"scopes": self.scopes, "replies": self.replies, "tokens": self.tokens,
                "bytes": self.bytes, "cap_bytes": self.cap_bytes}


class _Scope:
    def __init__(self) -> None:
        self.index = SuffixIndex()
        self.order: list[int] = []  # sequence ids, oldest first
        self.digests: dict[bytes, int] = {}  # reply digest -> sequence id (no duplicates)


class SuffixMemory:
    def __init__(self, cap_bytes: int = DEFAULT_CAP_BYTES):
        self.cap_bytes = max(0, int(cap_bytes))
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()

    def index(self, scope: str) -> SuffixIndex | None:
        """The scope's store to read (None when it holds nothing yet)."""
        entry = self._scopes.get(scope)
        if entry is None:
            return None
        self._scopes.move_to_end(scope)
        return entry.index

    def remember(self, scope: str, tokens: Sequence[int]) -> bool:
        """Keep a reply in the scope's store; False when it is empty or already kept."""
        tokens = list(tokens)[-MAX_REPLY_TOKENS:]
        if len(tokens) < 2 or self.cap_bytes <= 0:
            return False
        digest = hashlib.blake2b(repr(tokens).encode(), digest_size=16).digest()
        entry = self._scopes.get(scope)
        if entry is None:
            entry = self._scopes[scope] = _Scope()
        self._scopes.move_to_end(scope)
        if digest in entry.digests:
            return False
        seq_id = entry.index.add(tokens)
        entry.order.append(seq_id)
        entry.digests[digest] = seq_id
        self._shrink()
        return seq_id in entry.index.seqs

    def forget(self, scope: str) -> None:
        self._scopes.pop(scope, None)

    def clear(self) -> None:
        self._scopes.clear()

    @property
    def bytes(self) -> int:
        return sum(s.index.approx_bytes for s in self._scopes.values())

    def stats(self) -> MemoryStats:
        return MemoryStats(
            scopes=len(self._scopes),
            replies=sum(len(s.order) for s in self._scopes.values()),
            tokens=sum(s.index.n_tokens for s in self._scopes.values()),
            bytes=self.bytes,
            cap_bytes=self.cap_bytes,
        )

    def _shrink(self) -> None:
        total = self.bytes
        while total > self.cap_bytes and self._scopes:
            name, entry = next(iter(self._scopes.items()))  # least recently used
            seq_id = entry.order.pop(0)
            before = entry.index.approx_bytes
            entry.index.remove(seq_id)
            entry.digests = {d: s for d, s in entry.digests.items() if s != seq_id}
            total -= before - entry.index.approx_bytes
            if not entry.order:
                del self._scopes[name]


def scope_for_key(api_key: str | None, conversation: str | None = None) -> str:
    """A server scope: a digest of the API key (never the key itself), and the conversation."""
    key = hashlib.sha256((api_key or "").encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"key:{key}" + (f"/{conversation}" if conversation else "")
