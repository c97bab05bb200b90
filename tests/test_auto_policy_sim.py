"""The auto kind's choice over whole replies, against sources whose acceptance is drawn at
random: what sampled decoding looks like to it (every round's acceptance a coin flip per
proposal), on a processor where verifying costs (this computer's kind of table: a pass over
two tokens costs 1.4 plain steps). The replies are short, as chat replies are, so what trying
the sources costs counts.

The policy sees only what it would see in a reply: its choices' verdicts, the tokens each step
committed and the steps' times. A reply's speed is its tokens per plain step of cost; plain
decoding is 1.0.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from app.engine.auto_memory import History
from app.engine.auto_policy import AutoPolicy

# one pass over n tokens, in plain steps (a busy two-core CPU, a 100M-parameter target)
TABLE = {1: 1.0, 2: 1.39, 3: 1.61, 4: 1.86, 5: 1.91, 9: 2.27, 17: 2.82}


def cpu_table(n: int, context: int) -> float:
    sizes = sorted(TABLE)
    if n <= 1:
        return 1.0
    if n >= sizes[-1]:
        return TABLE[sizes[-1]]
    hi = next(s for s in sizes if s >= n)
    lo = max(s for s in sizes if s <= n)
    if hi == lo:
        return TABLE[lo]
    return TABLE[lo] + (TABLE[hi] - TABLE[lo]) * (n - lo) / (hi - lo)


@dataclass(frozen=True)
class Source:
    first: float  # acceptance of a round's first proposal
    later: float  # of each later one, given the ones before it
    draft: Callable[[int], float]  # proposing k, in plain steps
    feed: float  # catching up, per token it missed, in plain steps
    width: int


def reply(sources: dict[str, Source], seed: int, tokens: int = 250,
          history: History | None = None) -> float:
    """One reply under the policy: tokens per plain step of cost (``history``: the pair's
    record of earlier replies, which the reply starts from and adds to)."""
    rng = random.Random(seed)
    policy = AutoPolicy({n: s.width for n, s in sources.items()}, verify_cost=cpu_table,
                        draft_cost={n: s.draft for n, s in sources.items()},
                        catch_up={n: (lambda f: lambda m, c: f * m)(s.feed)
                                  for n, s in sources.items()}, history=history)
    missed = dict.fromkeys(sources, 0)
    cost = done = 0.0
    while done < tokens:
        c = policy.choose(room=int(tokens - done) + 16, context=200)
        if c is None:
            step, got = 1.0, 1
            policy.observe_time(None, 0, 50.0, 200)
        else:
            s = sources[c.source]
            accepted = 0
            while accepted < c.width and rng.random() < (s.first if accepted == 0 else s.later):
                accepted += 1
            step = cpu_table(c.width + 1, 0) + s.draft(c.width) + s.feed * missed[c.source]
            got = accepted + 1
            policy.observe(c.source, c.width, accepted)
            missed[c.source] = 0
        for name in missed:
            if c is None or name != c.source:
                missed[name] += got
        policy.committed(got, c.source if c is not None else None)
        if c is not None:
            policy.observe_time(c.source, c.width, 50.0 * step, 200)
        cost += step
        done += got
    return done / cost


def speed(sources: dict[str, Source], replies: int = 40, *, remember: bool = False) -> float:
    """Mean speed of ``replies`` replies, each a fresh request (``remember``: one after
    another on the same pair, each starting from the record of those before it)."""
    history = History() if remember else None
    return sum(reply(sources, seed, history=history) for seed in range(replies)) / replies


def best_fixed(sources: dict[str, Source]) -> float:
    """The best one could do knowing every source's true rates: one source at one width."""
    best = 1.0
    for s in sources.values():
        for k in range(1, s.width + 1):
            tokens, reach = 1.0, 1.0
            for j in range(k):
                reach *= s.first if j == 0 else s.later
                tokens += reach
            best = max(best, tokens / (cpu_table(k + 1, 0) + s.draft(k)))
    return best


def members(mtp: tuple[float, float], dflash: tuple[float, float],
            draft: tuple[float, float]) -> dict[str, Source]:
    """An MTP head, a block drafter and a draft model with these (first, later) rates."""
    return {
        "mtp": Source(*mtp, draft=lambda k: 0.07 * k, feed=0.01, width=16),
        "dflash": Source(*dflash, draft=lambda k: 0.12, feed=0.01, width=16),
        "full-model": Source(*draft, draft=lambda k: 0.18 * k, feed=0.02, width=4),
    }


def test_no_source_pays_auto_stays_close_to_plain():
    """Every drafter below what verifying costs here: auto may spend a little trying them
    and probing, never the reply (the bound is plain decoding less 5%)."""
    sources = members((0.3, 0.3), (0.3, 0.3), (0.3, 0.3))
    assert best_fixed(sources) == 1.0
    assert speed(sources) >= 0.95


def test_sources_about_even_with_plain_cost_next_to_nothing():
    sources = members((0.5, 0.4), (0.35, 0.5), (0.4, 0.4))
    assert 1.0 < best_fixed(sources) < 1.05
    assert speed(sources) >= 0.97


def test_a_source_that_pays_is_found_and_kept():
    sources = members((0.7, 0.55), (0.35, 0.5), (0.4, 0.4))
    best = best_fixed(sources)
    assert best > 1.15
    assert speed(sources) >= 0.96 * best


def test_the_pairs_record_spares_later_replies_most_of_the_trying():
    """Replies one after another on the same pair, each starting from what the ones before
    it found: nearer plain where nothing pays, nearer the best where a source pays, than
    replies that each start from the prior."""
    none = members((0.3, 0.3), (0.3, 0.3), (0.3, 0.3))
    pays = members((0.7, 0.55), (0.35, 0.5), (0.4, 0.4))
    assert speed(none, remember=True) > speed(none)
    assert speed(pays, remember=True) > speed(pays)
    assert speed(pays, remember=True) >= 0.98 * best_fixed(pays)
