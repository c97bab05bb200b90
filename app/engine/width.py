"""How many proposals a round asks for: the loop's width policy.

With per-token acceptance ``a``, a round of ``k`` proposals yields on average
``(1 - a^(k+1)) / (1 - a)`` tokens and costs ``1 + verify_slope * k + drafter.cost(k)``
target steps (a sequential drafter costs ``k`` of its steps, a block drafter one pass); a
plain step yields 1 token for 1 step. The policy picks the ``k`` (0 = plain step) with the
best ratio. While it decodes plainly it probes with one proposal every ``probe_every`` steps
so that a draft that starts agreeing is noticed; each failed probe doubles that interval (up
to ``probe_max``), an accepted one resets it. Acceptance is a decayed running count with a
weak prior of 0.6.

A drafter that stops early by itself (a confidence stop) is asked for the full width once
the policy decides drafting pays; a probe stays one token.
"""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_VERIFY_SLOPE = 0.06  # extra cost per verified token, in target steps (before warm-up)
DEFAULT_DRAFT_COST = 0.05  # one draft step, in target steps (before warm-up)


class WidthPolicy:
    def __init__(self, max_width: int, *, cost: Callable[[int], float] | None = None,
                 probe_every: int = 16, probe_max: int = 64, decay: float = 0.9):
        self.max_width = max_width
        self.cost = cost  # drafter.cost(k), in target steps; None: k * draft_cost
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.probe_interval = probe_every
        self.decay = decay
        self.accepted = 0.6  # weak prior: acceptance 0.6 until observed
        self.rejected = 0.4
        self.verify_slope = DEFAULT_VERIFY_SLOPE
        self.draft_cost = DEFAULT_DRAFT_COST
        self.plain_streak = 0
        self.probing = False  # the last choice was a one-token probe while decoding plainly

    def set_costs(self, *, verify_slope: float, draft_cost: float | None = None) -> None:
        self.verify_slope = max(0.0, verify_slope)
        if draft_cost is not None:
            self.draft_cost = max(0.0, draft_cost)

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def drafting_cost(self, k: int) -> float:
        if self.cost is not None:
            return max(0.0, self.cost(k))
        return self.draft_cost * k

    def gain(self, k: int) -> float:
        a = min(self.alpha, 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / (1 + self.verify_slope * k + self.drafting_cost(k))

    def choose(self, k_max: int) -> int:
        k_max = min(k_max, self.max_width)
        best = max(range(k_max + 1), key=self.gain)
        self.probing = False
        if best == 0:
            self.plain_streak += 1
            if self.plain_streak >= self.probe_interval and k_max >= 1:
                self.plain_streak = 0
                self.probing = True
                return 1
        else:
            self.plain_streak = 0
        return best

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
