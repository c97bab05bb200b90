"""What a round costs the auto kind, in plain steps: the target's verify pass by size and
context (this machine's calibration table, or a line before there is one), and what a drafter
that feeds the tokens it missed pays for them at its next proposal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

VerifyCost = Callable[[int, int], float]  # (tokens in the pass, context) -> plain steps


def linear_verify_cost(slope: float) -> VerifyCost:
    """A pass over ``n`` tokens costing ``1 + slope * (n - 1)`` steps (no calibration yet)."""
    return lambda n, context: 1.0 + slope * max(0, n - 1)


def remembered(cost: VerifyCost) -> VerifyCost:
    """``cost`` remembered per pass size at the context last asked about: one step's choice
    asks the table the same few sizes many times over (every source, width and tree shape)."""
    seen: dict[int, float] = {}
    at: list[int | None] = [None]

    def cached(n: int, context: int) -> float:
        if context != at[0]:
            seen.clear()
            at[0] = context
        v = seen.get(n)
        if v is None:
            v = seen[n] = cost(n, context)
        return v

    return cached


TIMED_STEPS = 2  # plain steps the host work is timed from before rounds alone may stand


@dataclass
class HostWork:
    """What a reply's plain step takes beyond the target's pass in the table (sampling, the
    host's bookkeeping between passes), in milliseconds; ``None`` before any was timed. Every
    step pays it once, a round as a plain step, so a wide pass costs fewer of the reply's own
    plain steps than the table's ratio says. Kept with the pair: a request starts from what the
    last one measured.

    Only a plain step shows it: a round's time beyond its pass also holds what the round
    itself costs (sampling every position, the verdict, the drafter's bookkeeping), so a
    guess read from a round (``timed`` 0) prices a plain step too dear, and every round then
    looks cheaper than it is. A reply that drafts from its first step would never correct
    it; the policy takes plain steps to time it until ``TIMED_STEPS`` have been."""

    ms: float | None = None
    timed: int = 0  # plain steps it was timed from (0: at most a guess from a round's time)


CatchUp = Callable[[int, int], float]  # (tokens missed, context) -> plain steps


def catch_up_cost(step_cost: float, usual: int, verify_cost: VerifyCost,
                  widest: int) -> CatchUp:
    """What a drafter that feeds the tokens it missed at its next proposal pays for ``n`` of
    them: its usual first pass (over ``usual`` tokens, costing ``step_cost``) made longer by
    ``n``, priced by this machine's shape of a pass by size (the target's table); past the
    ``widest`` size measured a pass grows in proportion to its tokens."""

    def shape(m: int, context: int) -> float:
        if m <= widest:
            return verify_cost(m, context)
        return verify_cost(widest, context) * m / widest

    def cost(n: int, context: int) -> float:
        if n <= 0 or step_cost <= 0:
            return 0.0
        base = shape(usual, context)
        return step_cost * max(0.0, shape(usual + n, context) - base) / base

    return cost
