"""How many proposals a round asks for: the loop's width policy.

Acceptance is tracked per depth: ``a_j``, how often the ``j``-th proposal of a round is
accepted when the ones before it were (a decayed running count per depth). Each depth keeps
the weight of one observation on a prior (against about ten rounds of decayed counts): 0.6 for
the first proposal, and for a later one the rate of the depth before it — a proposal is not assumed better than the one it follows, so a
depth that rounds seldom reach is not tried wider on a hopeful guess. Later proposals are
often much weaker than the first — an MTP head chaining on its own state, a drafter far from
its training data — and one rate for all depths would send rounds too wide. A round of ``k`` proposals then yields on average
``1 + a_1 + a_1 a_2 + ... + a_1 ... a_k`` tokens and costs
``1 + verify_slope * k + drafter.cost(k)`` target steps (a sequential drafter costs ``k`` of
its steps, a block drafter one pass); a plain step yields 1 token for 1 step. The policy picks
the ``k`` (0 = plain step) with the best ratio. A depth that rounds have not reached yet takes
the rate of the one before, so a wider round is tried when the depths before it do well. While it decodes
plainly it probes with one proposal every ``probe_every`` steps so that a draft that starts
agreeing is noticed; each failed probe doubles that interval (up to ``probe_max``), an
accepted one resets it.

How well a drafter does changes along a reply (the preamble of a worked answer is hard to
guess, its arithmetic lines easy), so evidence ages with distance as well as with rounds:
every plain step ages the per-depth counts by ``plain_decay``, so a long plain stretch lets the
estimates drift back toward the prior and one accepted probe counts for something again,
instead of being outweighed by failures from far back in the reply.

A drafter that stops early by itself (a confidence stop) is asked for the full width once
the policy decides drafting pays; a probe stays one token.

The costs come from warm-up (bare target passes and draft steps) and are then corrected by
what rounds really take in this loop (``observe_time``): a round also pays sampling and the
verdict, rollback and the drafter's bookkeeping; whatever the plain step right after a
round takes beyond a plain step's time is charged to the round too. The measured excess over
the modelled cost, in plain steps, is a running ``overhead`` added to every width (never below
zero: timing can only make rounds dearer than warm-up said, not cheaper).
"""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_VERIFY_SLOPE = 0.06  # extra cost per verified token, in target steps (before warm-up)
DEFAULT_DRAFT_COST = 0.05  # one draft step, in target steps (before warm-up)
PRIOR_RATE = 0.6  # the first proposal's acceptance before any is observed
PRIOR_WEIGHT = 1.0  # in observed rounds
TIME_WEIGHT = 0.2  # weight of the newest timing in the running step time and overhead
# the measured overhead only ever adds to the warm-up model: a policy that believed a round
# cheaper than a target pass would draft at any acceptance
OVERHEAD_RANGE = (0.0, 2.0)


class WidthPolicy:
    def __init__(self, max_width: int, *, cost: Callable[[int], float] | None = None,
                 probe_every: int = 16, probe_max: int = 64, decay: float = 0.9,
                 plain_decay: float = 0.97):
        self.max_width = max_width
        self.cost = cost  # drafter.cost(k), in target steps; None: k * draft_cost
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.probe_interval = probe_every
        self.decay = decay
        self.plain_decay = plain_decay
        self.accepted = 0.6  # weak prior: acceptance 0.6 until observed
        self.rejected = 0.4
        # per depth j (0-based): decayed count of rounds that reached it, and of acceptances
        self.reached = [0.0] * max(max_width, 1)
        self.hits = [0.0] * max(max_width, 1)
        self.verify_slope = DEFAULT_VERIFY_SLOPE
        self.draft_cost = DEFAULT_DRAFT_COST
        self.plain_streak = 0
        self.probing = False  # the last choice was a one-token probe while decoding plainly
        self.step_ms: float | None = None  # running wall time of a pipelined plain step
        self.overhead = 0.0  # a round's measured cost beyond the modelled one, in plain steps
        self.overhead_n = 0  # rounds measured
        self._open: tuple[int, float] | None = None  # the last round (k, ms), not yet charged
        self._after_other = False  # the last step was one the policy did not size

    def set_costs(self, *, verify_slope: float, draft_cost: float | None = None) -> None:
        self.verify_slope = max(0.0, verify_slope)
        if draft_cost is not None:
            self.draft_cost = max(0.0, draft_cost)

    @property
    def alpha(self) -> float:
        """Accepted tokens per rejection: the per-token rate of a geometric model (shown in
        stats; the width choice uses the per-depth rates)."""
        return self.accepted / (self.accepted + self.rejected)

    def rates(self, n: int) -> list[float]:
        """Acceptance of the first ``n`` proposals (0-based depth), each given the ones before
        it; a depth's prior is the rate before it."""
        out, prior = [], PRIOR_RATE
        for j in range(n):
            prior = (self.hits[j] + PRIOR_WEIGHT * prior) / (self.reached[j] + PRIOR_WEIGHT)
            out.append(min(prior, 0.999))
        return out

    def rate(self, depth: int) -> float:
        """Acceptance of the ``depth``-th proposal (0-based) given the ones before it."""
        return self.rates(depth + 1)[-1]

    def drafting_cost(self, k: int) -> float:
        if self.cost is not None:
            return max(0.0, self.cost(k))
        return self.draft_cost * k

    def gain(self, k: int, rates: list[float] | None = None) -> float:
        tokens, reach = 1.0, 1.0
        for r in (rates if rates is not None else self.rates(k))[:k]:
            reach *= r
            tokens += reach
        return tokens / self.round_cost(k)

    def round_cost(self, k: int) -> float:
        """A round of ``k`` proposals in plain steps (1 for ``k == 0``)."""
        if k <= 0:
            return 1.0
        return max(1.0, 1 + self.verify_slope * k + self.drafting_cost(k) + self.overhead)

    def choose(self, k_max: int) -> int:
        k_max = min(k_max, self.max_width)
        rates = self.rates(k_max)  # once per round, not once per width tried
        best = max(range(k_max + 1), key=lambda k: self.gain(k, rates))
        self.probing = False
        if best == 0:
            self._age()
            self.plain_streak += 1
            if self.plain_streak >= self.probe_interval and k_max >= 1:
                self.plain_streak = 0
                self.probing = True
                return 1
        else:
            self.plain_streak = 0
        return best

    def _age(self) -> None:
        """One plain step: older rounds count for a little less."""
        d = self.plain_decay
        self.reached = [r * d for r in self.reached]
        self.hits = [h * d for h in self.hits]

    def request(self, k_max: int, *, stops_early: bool) -> int:
        """The width to ask the drafter for (0: decode plainly)."""
        chosen = self.choose(k_max)
        if chosen > 0 and stops_early and not self.probing:
            return min(k_max, self.max_width)
        return chosen

    def observe(self, proposed: int, accepted: int) -> None:
        if self.probing:
            self.probe_interval = (self.probe_every if accepted else
                                   min(self.probe_interval * 2, self.probe_max))
        self.accepted = self.decay * self.accepted + accepted
        self.rejected = self.decay * self.rejected + (1 if accepted < proposed else 0)
        for j in range(min(accepted + 1, proposed, len(self.reached))):
            self.reached[j] = self.decay * self.reached[j] + 1
            self.hits[j] = self.decay * self.hits[j] + (1 if j < accepted else 0)

    def observe_time(self, k: int, ms: float) -> None:
        """Wall time of one loop step: a plain step (``k == 0``) or a round of ``k``."""
        if k <= 0:
            if self._after_other:  # it carries another round's trailing work: not a clean step
                self._after_other = False
                return
            if self._open is not None:  # the step after a round: any extra it takes is the round's
                rk, rms = self._open
                self._open = None
                if self.step_ms is not None:
                    self._charge(rk, rms + max(0.0, ms - self.step_ms))
                return
            self.step_ms = ms if self.step_ms is None else (
                (1 - TIME_WEIGHT) * self.step_ms + TIME_WEIGHT * ms)
            return
        self._after_other = False
        if self._open is not None:  # back-to-back rounds: the previous one is complete
            self._charge(*self._open)
        self._open = (k, ms)

    def observe_other(self) -> None:
        """A step this policy did not size (a copy round beside the drafter): an open round is
        charged as measured so far, and the plain step after it, which carries the other
        round's trailing work, is not taken as a plain step's time."""
        if self._open is not None:
            self._charge(*self._open)
            self._open = None
        self._after_other = True

    def _charge(self, k: int, ms: float) -> None:
        if not self.step_ms:
            return  # no plain step measured yet: keep the warm-up model
        modelled = 1 + self.verify_slope * k + self.drafting_cost(k)
        excess = min(max(ms / self.step_ms - modelled, OVERHEAD_RANGE[0]), OVERHEAD_RANGE[1])
        self.overhead = excess if self.overhead_n == 0 else (
            (1 - TIME_WEIGHT) * self.overhead + TIME_WEIGHT * excess)
        self.overhead_n += 1


class FixedWidth(WidthPolicy):
    """Drafts the full width at every step (measurements, and tests whose subject is the
    drafter's proposals rather than when drafting pays); it still keeps the evidence."""

    def choose(self, k_max: int) -> int:
        self.probing = False
        return k_max


PolicyFactory = Callable[..., WidthPolicy]  # (max_width, *, cost) -> a policy for one request
