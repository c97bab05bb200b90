"""What the auto kind's steps really take on this machine, learnt from their wall times.

The calibration table times the target's pass alone. A reply's step also does the host's work
(sampling, the bookkeeping between passes), once per step whatever its width, so a pass is
priced in the reply's own plain steps: ``(T(n) + h) / (T(1) + h)`` (``model_share``), ``h``
timed from plain steps and kept for the pair (``HostWork``). Only a plain step shows it (a
round's time also holds the round's own work), so while the pair's host work has been timed
from fewer than ``TIMED_STEPS`` plain steps a reply takes its next steps plain, its first one
aside (``take_timing_step``).

What a source's rounds take beyond the model (sampling every position, the verdict, its
bookkeeping) is measured per source (``overhead``) and added to its cost; a source the reply
has not tried yet is priced with what the other sources' rounds took beyond the model
(``excess``), not as if its rounds cost the table's pass alone. A tree round's cost beyond the
pass over its nodes is measured per source too (``tree_overhead``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from app.engine.auto_costs import TIMED_STEPS, HostWork

TIME_WEIGHT = 0.2  # weight of the newest timing in the running step time and overhead
# a round's measured cost beyond the model, in plain steps: below zero where the reply's rounds
# run cheaper than the table says (it was measured at another moment, without a reply's own
# per-step work in the plain step it divides by), so the table is corrected both ways
OVERHEAD_RANGE = (-0.25, 2.0)
# what any round takes beyond the model (the verdict, sampling, the host's work), shared by
# every source until it has rounds of its own: the median of the last few rounds of any source
EXCESS_ROUNDS = 5
EXCESS_RANGE = (-0.25, 0.5)
TREE_OVERHEAD_RANGE = (0.0, 3.0)  # a tree round's measured cost beyond a chain's, in steps


class StepTiming:
    """One reply's measured step times, and what they say rounds cost beyond the model."""

    def __init__(self, *, learn: bool = True,
                 step_ms_at: Callable[[int], float] | None = None,
                 host: HostWork | None = None):
        """``learn``: measured step times refine the costs (off: the table alone);
        ``step_ms_at(context)``: this machine's plain step in milliseconds (the table's),
        which rounds are timed against until the reply has taken plain steps of its own;
        ``host``: what a plain step takes beyond that (the pair's, updated here)."""
        self.learn = learn
        self.step_ms: float | None = None  # the reply's own plain steps, as they run
        self.step_ms_at = step_ms_at
        self.host = host if host is not None else HostWork()
        self.timing_steps = 0  # plain steps the reply took to time the host work
        self._share: tuple[int, float | None, float] = (-1, None, 1.0)  # (context, host, share)
        self.overhead: dict[str, float] = {}  # per source: measured cost beyond the model
        self.excesses: list[float] = []  # the last rounds' cost beyond the model, any source
        # what a round of any source has taken beyond the model lately (plain steps): their
        # median, of at least three (nothing measured counts as none), so one round that met
        # a pause moves it not at all
        self.excess = 0.0
        self.tree_overhead: dict[str, float] = {}  # per source: a tree round's measured extra

    def model_share(self, context: int) -> float:
        """The share of a reply's plain step that is the target's pass (1 before any host
        work was timed, or without the table's step time)."""
        if self.step_ms_at is None or not self.host.ms:
            return 1.0
        at, host, share = self._share
        if at != context or host != self.host.ms:
            step = self.step_ms_at(context)
            share = step / (step + self.host.ms) if step > 0 else 1.0
            self._share = (context, self.host.ms, share)
        return share

    def overhead_of(self, source: str) -> float:
        """``source``'s measured cost beyond the model; before it has rounds of its own, what
        rounds of the other sources took (a source never tried is not priced as free)."""
        own = self.overhead.get(source)
        return own if own is not None else self.excess

    def take_timing_step(self, steps: int) -> bool:
        """Whether the reply's step ``steps`` is a plain one taken to time the host work (and
        count it): while it has been timed from fewer than ``TIMED_STEPS`` plain steps (a
        guess read from a round prices a plain step too dear, so every round would look
        cheaper than it is), not at a reply's first step (it meets one-time costs), at most
        ``TIMED_STEPS`` per reply."""
        due = (self.learn and self.step_ms_at is not None and steps > 1
               and self.host.timed < TIMED_STEPS and self.timing_steps < TIMED_STEPS)
        if due:
            self.timing_steps += 1
        return due

    def step(self, context: int) -> float | None:
        """A plain step's milliseconds: the reply's own once it took any, else as it would
        take one (the table's pass and the host work every step pays, as last timed): timing
        a round against the pass alone would take the host work for the round's own
        overhead."""
        if self.step_ms:
            return self.step_ms
        if self.step_ms_at is None:
            return None
        return self.step_ms_at(context) + (self.host.ms or 0.0)

    def plain(self, ms: float, context: int) -> None:
        """A plain step took ``ms``: the reply's step time, and the host work beyond the
        table's pass (at most a pass more): the first plain steps' mean (a guess from a round
        replaced), then a running figure."""
        self.step_ms = ms if self.step_ms is None else (
            (1 - TIME_WEIGHT) * self.step_ms + TIME_WEIGHT * ms)
        if self.step_ms_at is None:
            return
        table = self.step_ms_at(context)
        host = min(max(ms - table, 0.0), table)
        n = self.host.timed
        weight = 1.0 / (n + 1) if n < TIMED_STEPS else TIME_WEIGHT
        self.host.ms = host if self.host.ms is None else (
            (1 - weight) * self.host.ms + weight * host)
        self.host.timed = n + 1

    def guess_host(self, ms: float, context: int, passes: float, extra: float) -> None:
        """Where no plain step was ever timed (a fresh start whose replies draft from their
        first step), the host work a round shows, its source's own overhead taken as none,
        the neutral guess: the round took ``T v + h + e (T + h)`` with ``T`` the table's step,
        ``v`` (``passes``) its pass, ``e`` (``extra``) the drafting and catch-up it paid, in
        steps. At most a pass, as timed from plain steps."""
        if self.step_ms is not None or self.host.ms is not None or self.step_ms_at is None:
            return
        table = self.step_ms_at(context)
        host = (ms - table * passes - extra * table) / (1.0 + extra)
        self.host.ms = min(max(host, 0.0), table)

    def round(self, source: str, excess: float) -> None:
        """A chain round of ``source`` took ``excess`` plain steps beyond its model: its own
        overhead moves from what it was (or, new, from what rounds of any source took) a
        little toward it, so one round that met a pause does not shut a source out."""
        excess = min(max(excess, OVERHEAD_RANGE[0]), OVERHEAD_RANGE[1])
        start = self.overhead_of(source)
        self.excesses = [*self.excesses, min(max(excess, EXCESS_RANGE[0]),
                                             EXCESS_RANGE[1])][-EXCESS_ROUNDS:]
        self.excess = statistics.median([*self.excesses, *[0.0] * (3 - len(self.excesses))])
        self.overhead[source] = (1 - TIME_WEIGHT) * start + TIME_WEIGHT * excess

    def tree(self, source: str, extra: float) -> None:
        """A tree round of ``source`` took ``extra`` plain steps beyond its pass and chain."""
        extra = min(max(extra, TREE_OVERHEAD_RANGE[0]), TREE_OVERHEAD_RANGE[1])
        old = self.tree_overhead.get(source)
        self.tree_overhead[source] = extra if old is None else (
            (1 - TIME_WEIGHT) * old + TIME_WEIGHT * extra)
