"""Where a round's proposal comes from: prompt lookup's copy, the drafter, the width policy.

``ProposalSource`` is built by the caller (``for_drafter``) and handed to the round loop, so a
test or a measurement injects its own width policy and the loop never decides how proposals
are made. Each step the loop asks ``next`` for a ``Pick`` (None: decode plainly), tells
``judged`` the verdict, ``observe`` the committed tokens and ``timed`` the step's wall time.

Copy rounds (``lookup_assist``) are verified by their own rule and are not the drafter's
evidence: the policy does not see their acceptance or their time (``observe_other``), and the
drafter observes their tokens as committed text.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.drafters import lookup_assist
from app.engine.drafters.base import Drafter
from app.engine.drafters.lookup_assist import LookupAssist
from app.engine.events import RULE_NONE, RULE_REJECTION, RULE_SAMPLE_MATCH, SamplingParams
from app.engine.proposal import Proposal
from app.engine.taps import Hidden, TapRequest
from app.engine.tree_build import NodeBudget
from app.engine.width import PolicyFactory, WidthPolicy
from app.kinds import OFF


@dataclass(frozen=True)
class Pick:
    """One round's proposal and how to judge it."""

    proposal: Proposal
    rule: str
    copied: bool  # prompt lookup's copy beside the drafter
    width: int  # the width the round was sized at
    source: str = ""  # which of several sources proposed it (the auto kind's members)


class ProposalSource:
    def __init__(self, *, drafter: Drafter | None, rule: str, width: int,
                 policy: WidthPolicy | None = None, assist: LookupAssist | None = None,
                 budget: NodeBudget | None = None):
        """``budget``: grow trees from the drafter's chains where they pay (None: chains)."""
        self.drafter = drafter
        self.rule = rule if drafter is not None else RULE_NONE
        self.width = width if drafter is not None else 0
        self.policy = policy
        self.assist = assist
        self.budget = budget if drafter is not None else None
        self._trees_ok = False
        if self.budget is not None and drafter is not None:
            drafter.keep_dist = True

    @property
    def kind(self) -> str:
        return self.drafter.kind if self.drafter is not None else OFF

    @property
    def members_named(self) -> tuple[str, ...]:
        """The sources counted one by one in timings (several take turns: auto)."""
        return ()

    @property
    def taps(self) -> TapRequest | None:
        return self.drafter.taps if self.drafter is not None else None

    # -- per request ------------------------------------------------------------------
    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        # a tree's branches would each need their own penalty history: chains then
        self._trees_ok = self.budget is not None and not sm.make_processors(sampling)
        if self.drafter is not None:
            self.drafter.tree_candidates = self._trees_ok
        if self.assist is not None:
            self.assist.begin(prompt, sampling)
        return self.drafter.begin(prompt, sampling) if self.drafter is not None else []

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        if self.drafter is not None:
            self.drafter.prefill(tokens, hidden)

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()

    # -- per step -----------------------------------------------------------------------
    def next(self, committed: list[int], remaining: int) -> Pick | None:
        """The next round's proposal for at most ``remaining`` more tokens (None: plain)."""
        if self.assist is not None:
            copy = self.assist.propose(committed, remaining - 1)
            if copy is not None:
                return Pick(copy, self.assist.rule, True, copy.k)
        k = min(self.width, remaining - 1)
        if self.drafter is None or k <= 0:
            return None
        if self.policy is not None:
            k = self.policy.request(k, stops_early=self.drafter.stops_early)
        proposal = self.drafter.propose(committed, k) if k > 0 else None
        if proposal is None or proposal.k == 0:
            return None
        if self._trees_ok and self.budget is not None:
            chain = proposal.spine or proposal.k  # a drafter-shaped tree: its chain's length
            rates = self.policy.rates(chain) if self.policy is not None else None
            cost = self.policy.drafting_cost(chain) if self.policy is not None else 0.0
            grown = self.budget.grow(proposal, rates, context=len(committed), draft_cost=cost,
                                     marginals=self.drafter.marginals)
            if grown is not proposal:  # its extra leaves are not draws from q: the walk rule
                rule = RULE_SAMPLE_MATCH if self.rule == RULE_REJECTION else self.rule
                return Pick(grown, rule, False, k)
        return Pick(proposal, self.rule, False, k)

    def judged(self, pick: Pick, accepted: int, path: tuple[int, ...] | None = None) -> None:
        """The verdict of a round (the policy's evidence, copies aside); a tree's evidence is
        its drafter's chain and how far along it the accepted ``path`` went."""
        if self.policy is not None and not pick.copied:
            chain, on_chain = pick.proposal.drafted(path, accepted)
            self.policy.observe(chain.k, on_chain)

    def observe(self, committed: list[int], pick: Pick | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None,
                path: tuple[int, ...] | None = None) -> None:
        """The tokens a step committed and the target rows it kept (a tree: the drafter sees
        its own chain, the accepted part of it, then the rest as committed text)."""
        if self.drafter is None:
            return
        copied = pick is not None and pick.copied
        proposal = pick.proposal if pick is not None else None
        if proposal is not None and not copied:
            proposal, accepted = proposal.drafted(path, accepted)
        # a copy round is committed text to the model drafter, not its proposal
        self.drafter.observe(committed, None if copied else proposal, accepted, new_tokens,
                             hidden)
        if self.assist is not None:
            self.assist.observe(committed, proposal if copied else None, accepted, new_tokens)

    def timed(self, pick: Pick | None, ms: float) -> None:
        """A step's wall time, for the policy's cost model."""
        if self.policy is None:
            return
        if pick is not None and (pick.copied or pick.proposal.parents is not None):
            self.policy.observe_other()  # a copy, or a tree: not what a chain of k costs
        else:
            self.policy.observe_time(0 if pick is None else pick.proposal.k, ms)


def for_drafter(drafter: Drafter | None, *, rule: str, width: int, lookup: bool = True,
                policy: PolicyFactory | None = WidthPolicy,
                verify_slope: float | None = None,
                budget: NodeBudget | None = None) -> ProposalSource:
    """The usual source: ``drafter`` sized by a ``policy`` (when it adapts its width), with
    prompt lookup's copies beside a model drafter (``lookup``)."""
    chosen: WidthPolicy | None = None
    if drafter is not None and drafter.adaptive_width and width > 0 and policy is not None:
        chosen = policy(width, cost=drafter.cost)
        if verify_slope is not None:
            chosen.set_costs(verify_slope=verify_slope)
    return ProposalSource(drafter=drafter, rule=rule, width=width, policy=chosen,
                          assist=lookup_assist.for_drafter(drafter, lookup), budget=budget)
