"""The auto kind's proposal source: every loaded drafter, one chosen per round.

``AutoSource`` holds one ``Member`` per proposal source the pair offers (prompt lookup, the MTP
head, the draft model, DFlash, any kind registered later) and asks ``AutoPolicy`` each step
which one proposes and how wide, or whether a plain step pays more. The members that propose
without a model (``eager``: prompt lookup's copy) are asked first, since their proposal is
free and its width is what they found; a model drafter is asked only when chosen.

Every member follows the committed text at every step, chosen or not: each observes the
tokens a step committed, with the target rows that step kept (``Fleet``: one drafter to the
round loop and the prompt cache, whose taps are the union of the members'), and only the
member whose proposal was verified sees it as its own. So the MTP head and DFlash always hold
exactly one row per position the target holds, whoever proposed. A member that feeds what it
was handed only at its next proposal (``Drafter.catches_up``) pays for the steps it sat out
then; the policy counts the tokens each has missed and prices that pass when it weighs a
switch.

A member that peeks (``Drafter.peeks``) and that the policy wants scored is asked for one
token beside the chosen model drafter's round or plain step; after the step its token is
compared with the committed one (``AutoPolicy.observe_peek``). Not beside a copy: where the
text repeats a drafter is right far more often than where it is chosen, and a drafter scored
there would be hoped for where it is not. The peek is timed apart, so the step's time the
policy learns from is the step's own.

A member that grows trees (``Member.trees``: its kind grows them and the request did not turn
trees off) keeps its drafter's distribution with each chain. When the policy chooses a tree
round for it, the chain grows the leaves that pay (``NodeBudget``, priced with the policy's
costs: the same table, the tree round's measured extra) and is verified by the walk rule;
every round of it, chain or tree, tells the policy which runner-up the target's token was
where a proposal was rejected.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx

from app.engine import sampling as sm
from app.engine.auto_evidence import RUNNER_PRIOR, copy_match
from app.engine.auto_policy import MAX_TREE_NODES, AutoPolicy
from app.engine.drafters.base import Drafter
from app.engine.events import RULE_REJECTION, RULE_SAMPLE_MATCH, SamplingParams
from app.engine.lease import union
from app.engine.mlx_types import float_rows, int_rows
from app.engine.prompt_cache import CachedState
from app.engine.proposal import Proposal
from app.engine.proposals import Pick, ProposalSource
from app.engine.taps import Hidden, TapRequest
from app.engine.tree_build import NodeBudget


@dataclass
class Member:
    """One proposal source of the auto kind."""

    name: str  # the kind's name (what timings and the stats line count it as)
    drafter: Drafter
    rule: str  # its acceptance rule under the request's sampling
    width: int  # its widest round
    eager: bool = False  # proposes without a model: asked every step, valued at what it found
    trees: bool = False  # its chains may grow into trees (its kind grows them, trees not off)


class Fleet(Drafter):
    """The members as one drafter for the round loop and the prompt cache: the prompt and
    every step's committed tokens and target rows go to each of them."""

    adaptive_width = False

    def __init__(self, members: list[Member], kind: str):
        self.kind = kind  # the combining kind's name (timings, kept states)
        self.members = members
        taps: TapRequest | None = None
        for m in members:
            taps = union(taps, m.drafter.taps)
        self.taps = taps
        keepers = [m for m in members if m.drafter.keeps_state]
        self.keeper = keepers[0] if keepers else None  # the one own model state a chat keeps
        self.keeps_state = self.keeper is not None
        self.stochastic = any(m.drafter.stochastic for m in members)

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        arrays: list[mx.array] = []
        for m in self.members:
            arrays += m.drafter.begin(prompt, sampling)
        return arrays

    def prefill(self, tokens: list[int], hidden: Hidden | None) -> None:
        for m in self.members:
            m.drafter.prefill(tokens, hidden)

    def propose(self, committed: list[int], k: int) -> Proposal | None:
        raise NotImplementedError("the auto kind's members propose, one per round")

    def observe(self, committed: list[int], proposal: Proposal | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None = None,
                proposer: str | None = None) -> None:
        """Every member sees the step; only ``proposer`` sees ``proposal`` as its own."""
        for m in self.members:
            m.drafter.observe(committed, proposal if m.name == proposer else None, accepted,
                              new_tokens, hidden)

    def close(self) -> None:
        for m in self.members:
            m.drafter.close()

    def state_key(self, width: int) -> str:
        assert self.keeper is not None
        return self.keeper.drafter.state_key(self.keeper.width)

    def kept_state(self) -> CachedState | None:
        return self.keeper.drafter.kept_state() if self.keeper is not None else None

    def resume(self, state: CachedState) -> None:
        assert self.keeper is not None
        self.keeper.drafter.resume(state)

    def resume_rows(self, rows: Hidden) -> None:
        for m in self.members:
            if m.drafter.taps is not None and not m.drafter.taps.empty:
                m.drafter.resume_rows(rows)

    def stats(self) -> dict[str, object]:
        return {m.name: m.drafter.stats() for m in self.members}


class AutoSource(ProposalSource):
    def __init__(self, members: list[Member], policy: AutoPolicy, *, rule: str, kind: str):
        self.fleet = Fleet(members, kind)
        super().__init__(drafter=self.fleet, rule=rule,
                         width=max((m.width for m in members), default=0))
        self.members = {m.name: m for m in members}
        self.auto = policy
        self.context = 0
        # copies found this step but not chosen: scored against what the step commits
        self.unused: dict[str, list[int]] = {}
        self.matched: dict[str, int] = {}  # this step's copies: each one's match (``copy_match``)
        self.prompt_len = 0
        self.budgets = {m.name: NodeBudget(policy.pass_cost, max_nodes=MAX_TREE_NODES)
                        for m in members if m.trees}
        for name in self.budgets:
            self.members[name].drafter.keep_dist = True
        self.chain: Proposal | None = None  # this round's chain with its distribution
        self.peeked: dict[str, int] = {}  # this step's peeks: each member's one token
        self.peek_ms = 0.0

    def begin(self, prompt: list[int], sampling: SamplingParams) -> list[mx.array]:
        self.prompt_len = len(prompt)
        # a tree's branches would each need their own penalty history: chains then
        if sm.make_processors(sampling):
            self.auto.trees = frozenset()
            for name in self.budgets:  # and no runner-up bookkeeping for trees never grown
                self.members[name].drafter.keep_dist = False
            self.budgets = {}
        return super().begin(prompt, sampling)

    @property
    def members_named(self) -> tuple[str, ...]:
        return tuple(self.members)

    def next(self, committed: list[int], remaining: int) -> Pick | None:
        room = remaining - 1
        self.context = len(committed)
        if room <= 0:
            return None
        found: dict[str, Proposal] = {}
        absent: set[str] = set()
        for m in self.members.values():
            if m.eager:
                p = m.drafter.propose(committed, min(m.width, room))
                if p is not None and p.k > 0:
                    found[m.name] = p
                else:
                    absent.add(m.name)
        self.matched = {n: copy_match(p.match, self.context - self.prompt_len)
                        for n, p in found.items()}
        choice = self.auto.choose(room, self.context, fixed={n: p.k for n, p in found.items()},
                                  matched=self.matched, absent=frozenset(absent))
        self.unused = {n: [int(t) for t in p.tokens.tolist()]  # type: ignore[union-attr, arg-type]
                       for n, p in found.items() if choice is None or n != choice.source}
        self._peek(committed, None if choice is None else choice.source)
        if choice is None:
            return None
        m = self.members[choice.source]
        proposal = found.get(m.name)
        if proposal is not None and choice.width < proposal.k and proposal.is_chain \
                and proposal.q is None and proposal.dist is None:
            # a copy cut where its evidence says the rest would not pay
            proposal = Proposal(tokens=proposal.tokens[: choice.width],
                                draft_ms=proposal.draft_ms, match=proposal.match)
        if proposal is None:
            k = choice.width
            if m.drafter.stops_early and not choice.probe:
                k = min(room, m.width)
            if choice.nodes:
                k = choice.width  # the chain the tree was valued with
            proposal = m.drafter.propose(committed, k)
            if proposal is None or proposal.k == 0:
                return None
        self.chain = proposal if m.name in self.budgets and proposal.dist is not None else None
        rule = m.rule
        if choice.nodes and m.name in self.budgets:
            grown = self._grow(m, proposal)
            if grown is not proposal:  # its extra leaves are not draws from q: the walk rule
                proposal = grown
                rule = RULE_SAMPLE_MATCH if rule == RULE_REJECTION else rule
        return Pick(proposal, rule, m.eager, choice.width, source=m.name)

    def _peek(self, committed: list[int], chosen: str | None) -> None:
        """Ask the members the policy wants scored (``AutoPolicy.to_peek``) for one token
        each, timed apart so the step's own time is not charged with them; none beside a
        copy (the model drafters are judged where they would be chosen)."""
        self.peeked = {}
        self.peek_ms = 0.0
        if chosen is not None and self.members[chosen].eager:
            return
        peekers = [m.name for m in self.members.values()
                   if m.drafter.peeks and not m.drafter.stochastic and not m.drafter.keep_dist]
        for name in self.auto.to_peek(peekers, chosen):
            started = time.perf_counter()
            p = self.members[name].drafter.propose(committed, 1)
            if p is not None and p.k > 0:
                self.peeked[name] = int_rows(p.tokens[None])[0][0]
            self.peek_ms += (time.perf_counter() - started) * 1e3

    def _grow(self, m: Member, chain: Proposal) -> Proposal:
        """``chain`` with the leaves that pay, priced as the policy prices rounds."""
        budget = self.budgets[m.name]
        budget.tree_overhead = self.auto.tree_extra(m.name, chain.k, self.context)
        return budget.grow(chain, self.auto.evidence[m.name].rates(chain.k),
                           context=self.context,
                           draft_cost=(self.auto.drafting(m.name, chain.k)
                                       + self.auto.overhead_of(m.name)),
                           marginals=m.drafter.marginals)

    def judged(self, pick: Pick, accepted: int, path: tuple[int, ...] | None = None) -> None:
        chain, on_chain = pick.proposal.drafted(path, accepted)  # a tree: its drafter's chain
        self.auto.observe(pick.source, chain.k, on_chain, matched=self.matched.get(pick.source))

    def observe(self, committed: list[int], pick: Pick | None, accepted: int,
                new_tokens: list[int], hidden: Hidden | None,
                path: tuple[int, ...] | None = None) -> None:
        proposal = pick.proposal if pick is not None else None
        if proposal is not None:
            proposal, accepted = proposal.drafted(path, accepted)
            if self.chain is not None and pick is not None and accepted < proposal.k:
                self._runner_up(pick.source, self.chain, accepted, new_tokens)
        self.chain = None
        self.fleet.observe(committed, proposal, accepted, new_tokens, hidden,
                           proposer=pick.source if pick is not None else None)
        for name, token in self.peeked.items():
            if new_tokens:
                self.auto.observe_peek(name, token == new_tokens[0])
        self.auto.committed(len(new_tokens), pick.source if pick is not None else None,
                            peeked=frozenset(self.peeked))
        self.peeked = {}
        for name, tokens in self.unused.items():  # free evidence: what the copy would have got
            n = min(len(tokens), len(new_tokens))
            hit = next((i for i in range(n) if tokens[i] != new_tokens[i]), n)
            if n > 0:
                self.auto.observe_unused(name, n, hit, matched=self.matched.get(name, 0))
        self.unused = {}

    def _runner_up(self, source: str, chain: Proposal, depth: int,
                   new_tokens: list[int]) -> None:
        """Proposal ``depth`` of ``chain`` was rejected: which of the drafter's runner-ups
        there the step's committed token was (the policy's evidence for trees)."""
        if chain.dist is None or depth >= len(new_tokens):
            return
        row = chain.dist[depth].astype(mx.float32)
        n = min(len(RUNNER_PRIOR) + 1, int(row.shape[-1]))
        top = mx.argsort(-row)[:n] if n >= row.shape[-1] else mx.argpartition(-row, kth=n)[:n]
        probs = row[top]
        mx.eval(top, probs, chain.tokens)
        own = int_rows(chain.tokens[None])[0][depth]
        ranked = sorted(zip(int_rows(top[None])[0], float_rows(probs[None])[0], strict=True),
                        key=lambda tp: -tp[1])
        runners = [t for t, _ in ranked if t != own][: len(RUNNER_PRIOR)]
        token = int(new_tokens[depth])
        self.auto.observe_miss(source, runners.index(token) if token in runners else None)

    def timed(self, pick: Pick | None, ms: float) -> None:
        ms = max(0.0, ms - self.peek_ms)  # the peeks are not the step's own work
        self.peek_ms = 0.0
        if pick is None:
            self.auto.observe_time(None, 0, ms, self.context)
        else:
            p = pick.proposal
            k = p.spine or p.k
            self.auto.observe_time(pick.source, k, ms, self.context,
                                   nodes=p.k if p.parents is not None else 0)
