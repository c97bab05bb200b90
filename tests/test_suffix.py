"""Suffix decoding's index and kept-reply store: what is proposed, how far, within what
memory, and never across scopes."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from app.engine.suffix_index import SuffixIndex
from app.engine.suffix_memory import SuffixMemory, scope_for_key


def test_continuation_of_the_longest_match_and_its_length_follows_the_match():
    idx = SuffixIndex()
    idx.add([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    short = idx.speculate([50, 3, 4], 16)  # a pair matches: at most 2 tokens
    assert short.tokens == (5, 6) and short.match == 2
    long = idx.speculate([1, 2, 3, 4, 5, 6], 16)  # six tokens match: six proposed
    assert long.tokens == (7, 8, 9, 10, 11, 12) and long.match == 6
    assert idx.speculate([1, 2, 3, 4, 5, 6], 3).tokens == (7, 8, 9)
    assert idx.speculate([1, 2, 3, 4, 5, 6], 16, factor=0.5).tokens == (7, 8, 9)
    assert idx.speculate([99, 98], 16).tokens == ()


def test_the_most_frequent_continuation_wins_and_rare_ones_stop_the_walk():
    idx = SuffixIndex()
    for tail in ([7, 8], [7, 8], [7, 9], [6, 1]):
        idx.add([1, 2, 3, *tail])
    spec = idx.speculate([1, 2, 3], 8)
    assert spec.tokens[0] == 7 and spec.probs[0] == pytest.approx(3 / 4)
    assert spec.tokens[1:] == (8,) and spec.probs[1] == pytest.approx(2 / 3)
    assert spec.score == pytest.approx(0.75 + 0.75 * 2 / 3)
    # with a stricter share the second token (2 of 3) is not proposed
    assert idx.speculate([1, 2, 3], 8, min_prob=0.7).tokens == (7,)


def test_the_text_being_queried_never_answers_itself():
    idx = SuffixIndex()
    seq = idx.add([5, 6, 7])
    assert idx.speculate([5, 6, 7], 4).tokens == ()  # its only occurrence is its own end
    idx.extend(seq, [5, 6])
    assert idx.speculate([5, 6, 7, 5, 6], 4).tokens == (7, 5)  # a pair matched: two tokens


def test_remove_forgets_every_position():
    idx = SuffixIndex()
    a = idx.add([1, 2, 3, 4])
    b = idx.add([9, 1, 2, 8])
    idx.remove(a)
    assert idx.speculate([1, 2], 4).tokens == (8,)
    assert all(p >> 32 == b for positions in idx.pairs.values() for p in positions)
    idx.remove(b)
    assert idx.pairs == {} and idx.n_tokens == 0


def test_memory_estimate_is_close_to_what_python_allocates():
    rng = random.Random(0)
    words = [rng.randrange(49152) for _ in range(3000)]
    text = [rng.choice(words) for _ in range(60_000)]
    tracemalloc.start()
    try:
        idx = SuffixIndex()
        for i in range(0, len(text), 400):
            idx.add(text[i:i + 400])
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.8 * allocated <= idx.approx_bytes <= 1.5 * allocated


def test_the_store_stays_within_its_cap_dropping_the_least_recently_used_scope_first():
    rng = random.Random(1)
    mem = SuffixMemory(cap_bytes=400_000)
    for i in range(200):
        scope = f"chat-{i % 5}"
        mem.remember(scope, [rng.randrange(5000) for _ in range(300)])
        assert mem.bytes <= mem.cap_bytes
    stats = mem.stats()
    assert stats.bytes <= 400_000 and stats.replies < 200 and stats.scopes >= 1
    lru = SuffixMemory(cap_bytes=10**9)
    lru.remember("a", [1, 2, 3, 4])
    one = lru.bytes
    lru.remember("b", [5, 6, 7, 8])
    lru.remember("c", [9, 10, 11, 12])
    assert lru.index("a") is not None  # read: "a" is now the most recently used
    lru.cap_bytes = 4 * one - 1  # one more reply forces one out
    assert lru.remember("c", [13, 14, 15, 16])
    assert lru.index("b") is None  # the least recently used scope went
    assert lru.index("a") is not None and lru.stats().replies == 3
    assert lru.remember("c", [13, 14, 15, 16]) is False  # a reply is kept once


def test_one_scope_never_reads_another_scopes_text():
    mem = SuffixMemory()
    secret = [101, 102, 103, 104, 105, 106]
    a, b = scope_for_key("key-a"), scope_for_key("key-b")
    assert a != b and "key-a" not in a
    mem.remember(a, [1, 2, *secret])
    assert mem.index(b) is None
    mem.remember(b, [1, 2, 3])
    spec = mem.index(b).speculate([1, 2], 8)
    assert not set(spec.tokens) & set(secret)
    assert mem.index(a).speculate([1, 2], 8).tokens[:2] == (101, 102)
    assert scope_for_key("clé", "c1") != scope_for_key("clé", "c2")
