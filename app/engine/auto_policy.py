"""Which proposal source a round uses, and how wide: the auto kind's choice.

Every source (prompt lookup's copy, the MTP head, the draft model, DFlash...) keeps its own
evidence per depth (``Evidence``): ``a_j``, how often its ``j``-th proposal of a round is
accepted when the ones before it were, as decayed counts on a prior. A round of ``k`` of its
proposals then yields on average ``1 + a_1 + a_1 a_2 + ... + a_1 ... a_k`` tokens and costs
``verify_cost(k + 1, context) + drafter_cost(k) + overhead`` plain steps, the verify cost read
from this machine's calibration table at the context the reply is at (a pass over more tokens
costs more, and more with a longer context) and priced in the reply's own steps, and the
overhead what the source's rounds were measured to take beyond that (``auto_timing``). A plain
step yields one token for one step.

``choose`` takes the source and width with the most expected tokens per plain step; when no
source beats a plain step it decodes plainly, and every ``probe_every`` plain steps it probes
the source with the best one-token value with a single proposal (each probe that does not
make drafting pay again doubles the interval up to ``probe_max``; a round that pays resets
it), so a source that starts agreeing again is noticed. Each model source a reply (or its chat) has
not tried gets one round of one proposal once ``TRY_AFTER`` steps have run, unless a copy is on
offer: its starting rates come from the pair's record, learnt on other text, and a source that
is never tried is never found to pay. A drafter whose one proposal is cheap and changes
nothing but what it has fed (``Drafter.peeks``: the MTP head, EAGLE-3) is also scored beside
the chosen round while it has seen few rounds (``to_peek``, ``PEEK_SEEN``): its one token is
compared with the committed one, as a round of one would be, without a round that loses.
Each plain step ages every source's
recent evidence a little, toward the source's long-run rate over the reply (the prior only
until it has done anything), so a source that lost does not drift back into wide rounds on
the prior's guess while plain steps run. A source that has seen few rounds is valued a
little above its rates (``EXPLORE``) so each gets tried, and tried at the width its rates
(not the optimism) say pays: a guess costs a narrow round.

A drafter that feeds the tokens it sat out at its next proposal (the draft model, the MTP
head, DFlash: ``Drafter.catches_up``) pays that longer pass when it is chosen again; the
policy counts the tokens each has missed (``committed``) and prices the pass
(``catch_up_cost``). A switch pays it once for the run of rounds it starts, so it is shared
over ``SWITCH_ROUNDS`` rounds (fewer near the reply's end) when a switch is weighed, and the
measured overhead is what a round takes beyond the model and its catch-up.

The choice reads only what is already committed (the evidence of earlier rounds) and measured
costs, never the target's output for the round being chosen, so each round's own acceptance
rule keeps the reply exact: identical to plain decoding at temperature 0, the same
distribution above it.

A source that grows trees (``trees``) is also valued as a tree: its chain of ``k`` plus extra
leaves, runner-up tokens beside the chain. Its evidence also counts, each time one of its
proposals was rejected, whether the target's token was the drafter's first, second or third
runner-up there (``Evidence.runner_rates``); a leaf of rank ``r`` beside proposal ``d`` then
adds ``reach_d * (1 - a_d) * runner_r`` expected tokens, and a tree of ``n`` nodes costs the
verify pass over ``n + 1`` tokens from the same table plus what a tree round costs beyond it
(``tree_extra``: measured once tree rounds ran, else the estimate of ``tree_build``). The
leaves are added most valuable first while the value grows, so the choice between a chain, a
tree and a plain step is one expected-value rule: on a flat table (a pass over 16 tokens
costing about one step, a GPU) trees pay, on a CPU's table they rarely do. Which leaves a
tree round gets is then decided from the drafter's own distribution (``tree_build``).

Evidence is carried across requests of the same chat, and a request that starts a chat begins
from what each source did on this pair before (``auto_memory``: the chat's evidence, the pair's
``History``); every round the policy observes is added to that history as it goes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.engine.auto_costs import CatchUp, HostWork, VerifyCost
from app.engine.auto_evidence import PRIOR_RATE, Evidence, copy_key, expected_tokens
from app.engine.auto_timing import StepTiming

if TYPE_CHECKING:
    from app.engine.auto_memory import History

EXPLORE = 0.15  # optimism for a source with little evidence: rate + EXPLORE / sqrt(1 + rounds)
SWITCH_ROUNDS = 4  # rounds a switch to a source is expected to last (its catch-up is shared)
TRY_AFTER = 4  # a reply's step from which each source it has not tried gets one narrow round
MAX_TREE_NODES = 16  # a tree round verifies at most this many nodes (the table's widest)
PEEK_SEEN = 8  # a source that peeks is scored beside other rounds until it has seen this many


@dataclass(frozen=True)
class Choice:
    source: str
    width: int
    value: float  # expected tokens per plain step
    probe: bool = False
    nodes: int = 0  # a tree round of this many nodes (``width`` of them its chain); 0: a chain


class AutoPolicy:
    def __init__(self, widths: dict[str, int], *, verify_cost: VerifyCost,
                 draft_cost: dict[str, Callable[[int], float]] | None = None,
                 evidence: dict[str, Evidence] | None = None,
                 priors: dict[str, float] | None = None,
                 catch_up: dict[str, CatchUp] | None = None,
                 probe_every: int = 16, probe_max: int = 64,
                 trees: frozenset[str] = frozenset(), tree_host: float = 0.0,
                 second_pass: bool = False, learn_time: bool = True,
                 history: History | None = None,
                 step_ms_at: Callable[[int], float] | None = None,
                 host: HostWork | None = None):
        """``widths``: each source's widest round; ``draft_cost[source](k)``: proposing ``k``
        in plain steps; ``evidence``: a chat's evidence, updated in place; ``catch_up[source]``:
        what feeding the tokens it missed costs it (sources that feed them at their next
        proposal). ``trees``: the sources whose rounds may be trees; ``tree_host``: what a tree
        round costs beyond its pass before any was measured (host work, plain steps);
        ``second_pass``: the target verifies trees path by path and feeds the kept path again
        (priced from the table); ``learn_time``: measured step times refine the costs (off:
        the table alone); ``history``: the pair's record, where a source new to ``evidence``
        starts and where every observation is also kept; ``step_ms_at(context)``: this
        machine's plain step in milliseconds (the table's), which rounds are timed against
        until the reply has taken plain steps of its own; ``host``: what a plain step takes
        beyond that (the pair's, updated as plain steps are timed)."""
        self.widths = dict(widths)
        self.verify_cost = verify_cost
        self.draft_cost = dict(draft_cost or {})
        self.catch_up = dict(catch_up or {})
        self.missed = {name: 0 for name in self.catch_up}  # tokens since its last proposal
        self.paying = 0.0  # the catch-up the chosen round pays (charged to it, not overhead)
        self.evidence = evidence if evidence is not None else {}
        self.history = history
        for name in self.widths:
            prior = (priors or {}).get(name, PRIOR_RATE)
            if name not in self.evidence:
                self.evidence[name] = (history.start(name, prior) if history is not None
                                       else Evidence(prior=prior))
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.probe_interval = probe_every
        self.plain_streak = 0
        self.probing = False
        self.timing = StepTiming(learn=learn_time, step_ms_at=step_ms_at, host=host)
        self.steps = 0  # steps this reply has chosen
        self.tried: set[str] = set()  # sources this reply gave their one try
        self.trees = frozenset(trees)
        self.tree_host = tree_host
        self.second_pass = second_pass

    # -- values -----------------------------------------------------------------------
    def drafting(self, source: str, k: int) -> float:
        cost = self.draft_cost.get(source)
        return max(0.0, cost(k)) if cost is not None and k > 0 else 0.0

    def pass_cost(self, n: int, context: int) -> float:
        """A target pass over ``n`` tokens in the reply's own plain steps: the table's pass
        plus the host work every step pays once (``host``), over a plain step that pays it
        too, so the host work makes a wide pass relatively cheaper."""
        v = self.verify_cost(n, context)
        return 1.0 + (v - 1.0) * self.timing.model_share(context) if v > 1.0 else v

    def round_cost(self, source: str, k: int, context: int, nodes: int = 0,
                   measured: bool = True) -> float:
        """A round of ``k`` of ``source``'s proposals, in plain steps (1 for ``k == 0``);
        ``nodes > k``: a tree of that many nodes grown from them; ``measured``: with what
        its rounds were measured to take beyond the model (off: the model alone)."""
        if k <= 0:
            return 1.0
        tree = self.tree_extra(source, k, context) if nodes > k else 0.0
        beyond = self.overhead_of(source) if measured else 0.0
        return max(1.0, self.pass_cost(max(k, nodes) + 1, context) + self.drafting(source, k)
                   + beyond + tree)

    def overhead_of(self, source: str) -> float:
        return self.timing.overhead_of(source)

    def tree_extra(self, source: str, k: int, context: int) -> float:
        """What a tree round from a chain of ``k`` costs beyond the pass over its nodes, in
        plain steps: as measured on this machine once tree rounds ran, else the host work's
        estimate plus, where trees are verified path by path, the second pass over the kept
        path (at most ``k + 1`` tokens, from the table)."""
        measured = self.timing.tree_overhead.get(source)
        if measured is not None:
            return measured
        return self.tree_host + (self.pass_cost(k + 1, context) if self.second_pass else 0.0)

    def owed(self, source: str, context: int) -> float:
        """What ``source``'s next proposal pays first to feed the tokens it missed."""
        cost = self.catch_up.get(source)
        return cost(self.missed.get(source, 0), context) if cost is not None else 0.0

    def value(self, source: str, k: int, context: int, rates: list[float] | None = None,
              room: int | None = None) -> float:
        """Expected committed tokens per plain step of a round of ``k`` (0: a plain step).

        A source that has to catch up first pays that once for the run of rounds a switch to
        it starts: it is shared over ``SWITCH_ROUNDS`` rounds, fewer when the reply has room
        for fewer (``room``: tokens left)."""
        if k <= 0:
            return 1.0
        rates = rates if rates is not None else self.evidence[source].rates(k)
        tokens = expected_tokens(rates, k)
        return tokens / (self.round_cost(source, k, context)
                         + self.switch_cost(source, context, tokens, room))

    def switch_cost(self, source: str, context: int, tokens: float,
                    room: int | None = None) -> float:
        """``source``'s catch-up, shared over the rounds a switch to it is expected to run
        (``SWITCH_ROUNDS``, fewer where the reply has room for fewer of ``tokens`` each)."""
        owed = self.owed(source, context)
        if owed <= 0:
            return 0.0
        rounds = SWITCH_ROUNDS if room is None else min(SWITCH_ROUNDS, room / tokens)
        return owed / max(1.0, rounds)

    def hopeful_rates(self, source: str, n: int) -> list[float]:
        """The rates the choice weighs: a little optimism while a source has seen few rounds
        over the reply, so one missed round does not shut it out (plain steps age its recent
        evidence but do not make it hopeful again)."""
        ev = self.evidence[source]
        return ev.rates(n, bonus=EXPLORE / math.sqrt(1.0 + ev.seen))

    def best(self, source: str, k_max: int, context: int,
             key: str | None = None) -> tuple[int, float]:
        """The width (at most ``k_max``) ``source`` would draft at, and its hopeful value
        (``key``: the evidence to read, a copy's match class; default the source's own).

        Optimism decides whether a source is tried, not how wide: the width is the one its
        evidence says pays best, so trying a source whose rates are a guess costs a narrow
        round, not a wide one."""
        room = k_max
        k_max = min(k_max, self.widths.get(source, 0))
        if k_max <= 0:
            return 0, 1.0
        key = key or source
        hopeful = self.hopeful_rates(key, k_max)
        rates = self.evidence[key].rates(k_max)
        widths = range(1, k_max + 1)
        k = max(widths, key=lambda w: self.value(source, w, context, rates, room))
        return k, max(self.value(source, w, context, hopeful, room) for w in widths)

    def best_tree(self, source: str, k_max: int, context: int) -> tuple[int, int, float]:
        """The best tree round of ``source`` with a chain of at most ``k_max``: (chain
        length, nodes, hopeful value); (0, 0, 0.0) when none can be grown. As for chains,
        the shape is the one its evidence says pays best (a guess is tried small), the
        value the hopeful one; leaves are added most valuable first (``runner_rates``)
        while the value grows."""
        room = k_max
        k_max = min(k_max, self.widths.get(source, 0), MAX_TREE_NODES - 1)
        if source not in self.trees or k_max <= 0:
            return 0, 0, 0.0
        known = self._tree_values(source, k_max, context, room,
                                  self.evidence[source].rates(k_max))
        if not known:
            return 0, 0, 0.0
        k, n = max(known, key=lambda shape: known[shape])
        hopeful = self._tree_values(source, k_max, context, room,
                                    self.hopeful_rates(source, k_max))
        return k, n, hopeful.get((k, n), known[(k, n)])

    def _tree_values(self, source: str, k_max: int, context: int, room: int,
                     rates: list[float]) -> dict[tuple[int, int], float]:
        """The value of each tree shape (chain length, nodes) at these rates."""
        runner = self.evidence[source].runner_rates()
        verify = [self.pass_cost(n, context) for n in range(MAX_TREE_NODES + 2)]
        base = self.overhead_of(source)
        out: dict[tuple[int, int], float] = {}
        for k in range(1, k_max + 1):
            reach = [1.0]
            for r in rates[:k]:
                reach.append(reach[-1] * r)
            gains = sorted((reach[d] * (1.0 - rates[d]) * p for d in range(k) for p in runner),
                           reverse=True)[: MAX_TREE_NODES - k]
            tokens = expected_tokens(rates, k)
            fixed = (self.drafting(source, k) + base + self.tree_extra(source, k, context)
                     + self.switch_cost(source, context, tokens, room))
            for n, gain in enumerate(gains, start=k + 1):
                tokens += gain
                out[(k, n)] = tokens / max(1.0, verify[n + 1] + fixed)
        return out

    # -- the choice ---------------------------------------------------------------------
    def choose(self, room: int, context: int, *, fixed: dict[str, int] | None = None,
               matched: dict[str, int] | None = None,
               absent: frozenset[str] = frozenset()) -> Choice | None:
        """The round to run with at most ``room`` proposals (None: a plain step).

        ``fixed``: sources whose proposal is already known (a copy of ``k`` tokens), valued
        at the width up to ``k`` that its evidence says pays best (the copy is cut there),
        the evidence of its match's class (``matched``: the copy's match, ``copy_match``;
        0 where not given); ``absent``: sources with nothing to offer this step."""
        fixed = fixed or {}
        matched = matched or {}
        self.steps += 1
        if self.timing.take_timing_step(self.steps):
            self.probing = False
            self.paying = 0.0
            return None
        best: Choice | None = None
        for name in self.widths:
            if name in absent:
                continue
            if name in fixed:  # a copy: sent whole or cut where its evidence says it pays
                k, v = self.best(name, min(fixed[name], room), context,
                                 key=self._copy_evidence(name, matched.get(name, 0)))
            else:
                k, v = self.best(name, room, context)
                tk, nodes, tv = self.best_tree(name, room, context)
                if tk > 0 and tv > v and (best is None or tv > best.value):
                    best = Choice(name, tk, tv, nodes=nodes)
                    continue
            if k > 0 and (best is None or v > best.value):
                best = Choice(name, k, v)
        self.probing = False
        self.paying = 0.0
        untried = self._untried(best, fixed, absent)
        if untried is not None:
            self.tried.add(untried)
            self.paying = self.owed(untried, context)
            return Choice(untried, 1, self.value(untried, 1, context), probe=True)
        if best is not None and best.value > 1.0:
            self.plain_streak = 0
            self.probe_interval = self.probe_every  # drafting pays again: probe soon after it
            self.paying = self.owed(best.source, context)
            return best
        for ev in self.evidence.values():
            ev.age()
        self.plain_streak += 1
        if self.plain_streak >= self.probe_interval and room >= 1:
            probe = self._probe_source(context, fixed, absent)
            if probe is not None:
                self.plain_streak = 0
                self.probing = True
                self.paying = self.owed(probe, context)
                return Choice(probe, 1, self.value(probe, 1, context), probe=True)
        return None

    def _untried(self, best: Choice | None, fixed: dict[str, int],
                 absent: frozenset[str]) -> str | None:
        """A model source this reply (or its chat) has not tried, given one narrow round
        once a few steps have run, unless a copy is on offer: what the pair's record says of it
        was learnt on other text (a drafter seldom right where copies had taken the easy places
        of a rewrite is often the best one on new code), and a source that is never tried is
        never found to pay."""
        if self.steps < TRY_AFTER or (best is not None and best.source in fixed):
            return None
        names = [n for n in self.widths if n not in fixed and n not in absent
                 and n not in self.tried and self.widths[n] > 0 and self.evidence[n].seen <= 0]
        return max(names, key=lambda n: self.evidence[n].rates(1)[0], default=None)

    def _probe_source(self, context: int, fixed: dict[str, int],
                      absent: frozenset[str]) -> str | None:
        """The source a probe asks: the best one-proposal value with the optimism of thin
        evidence, so a source that missed its few first rounds by bad luck is asked again."""
        names = [n for n in self.widths if n not in absent and self.widths[n] > 0
                 and fixed.get(n, 1) > 0]
        return max(names, key=lambda n: self.value(n, 1, context, self.hopeful_rates(n, 1)),
                   default=None)

    def committed(self, tokens: int, proposer: str | None,
                  peeked: frozenset[str] = frozenset()) -> None:
        """A step committed ``tokens``: the proposer and the sources that peeked have fed
        what they had missed (they are even again), every other source that catches up has
        that many more to feed."""
        for name in self.missed:
            even = name == proposer or name in peeked
            self.missed[name] = 0 if even else self.missed[name] + tokens

    def to_peek(self, peekers: list[str], chosen: str | None) -> list[str]:
        """Which of ``peekers`` (sources whose one-token proposal costs one drafting step and
        changes nothing else) to score beside this step's ``chosen`` source: those that have
        seen few rounds. A drafter whose one try missed by bad luck would otherwise not be
        chosen again, and one that is wrong on this text would cost rounds to find out; a
        peek costs a few percent of a step, so each is asked only until it has seen
        ``PEEK_SEEN`` rounds (peeks included)."""
        return [n for n in peekers if n != chosen and n in self.evidence
                and self.evidence[n].seen < PEEK_SEEN]

    def observe_peek(self, source: str, hit: bool) -> None:
        """A peek: ``source``'s one proposal was (``hit``) or was not the committed token,
        the evidence of a one-proposal round."""
        self._learn(source, 1, 1 if hit else 0, None)

    # -- evidence -----------------------------------------------------------------------
    def observe(self, source: str, proposed: int, accepted: int,
                matched: int | None = None) -> None:
        """A verified round of ``proposed`` of ``source``'s proposals (``matched``: a copy's
        match: its class's evidence learns too)."""
        if self.probing:  # a probe that did not make drafting pay again: wait longer
            self.probe_interval = min(self.probe_interval * 2, self.probe_max)
        self._learn(source, proposed, accepted, matched)

    def observe_unused(self, source: str, proposed: int, accepted: int,
                       matched: int | None = None) -> None:
        """A proposal that was found but not verified (a copy another source beat), scored
        against the tokens the step committed: as many of its tokens as the step committed
        are compared, so a copy that agreed with all of them is not counted as missing."""
        self._learn(source, proposed, accepted, matched)

    def _learn(self, source: str, proposed: int, accepted: int, matched: int | None) -> None:
        keys = [source] if matched is None else [source, self._copy_evidence(source, matched)]
        for key in keys:
            ev = self.evidence.get(key)
            if ev is not None:
                ev.observe(proposed, accepted)
                if self.history is not None:
                    self.history.observe(key, proposed, accepted)

    def _copy_evidence(self, source: str, matched: int) -> str:
        """The evidence key of ``source``'s copies after a match of ``matched`` tokens, made on
        first use: its prior is what the source's copies of any match do now, moved by the
        pair's record of that class where it has one."""
        key = copy_key(source, matched)
        if key not in self.evidence:
            own = self.evidence.get(source)
            prior = own.rates(1)[0] if own is not None else PRIOR_RATE
            self.evidence[key] = (self.history.start(key, prior) if self.history is not None
                                  else Evidence(prior=prior))
        return key

    def observe_miss(self, source: str, rank: int | None) -> None:
        """A rejected proposal of ``source``: the target's token was its drafter's runner-up
        ``rank`` there (None: none of the first ``len(RUNNER_PRIOR)``)."""
        ev = self.evidence.get(source)
        if ev is not None:
            ev.observe_miss(rank)
            if self.history is not None:
                self.history.observe_miss(source, rank)

    def observe_time(self, source: str | None, k: int, ms: float, context: int,
                     nodes: int = 0) -> None:
        """Wall time of one step: a plain one (``source`` None) or a round of ``k`` (a tree
        of ``nodes`` when more). Every step is one target pass here (plain steps are not
        pipelined beside drafters)."""
        timing = self.timing
        if not timing.learn:
            return
        if source is None or k <= 0:
            timing.plain(ms, context)
            return
        if nodes <= k and timing.host.ms is None:  # nothing timed yet: a guess from the round
            timing.guess_host(ms, context, self.verify_cost(k + 1, context),
                              self.drafting(source, k) + self.paying)
        step = timing.step(context)
        if not step:
            return
        if nodes > k:  # what the tree added beyond the pass over its nodes
            chain_part = (self.round_cost(source, k, context) - self.pass_cost(k + 1, context)
                          + self.paying)
            timing.tree(source, ms / step - self.pass_cost(nodes + 1, context) - chain_part)
            return
        modelled = self.round_cost(source, k, context, measured=False) + self.paying
        timing.round(source, ms / step - modelled)
