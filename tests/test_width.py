"""The width policy: how many proposals a round asks for, from acceptance per depth and
what rounds cost (warm-up model, then measured in the loop)."""

from __future__ import annotations

import pytest


def test_width_policy_follows_acceptance_and_cost():
    from app.engine.width import WidthPolicy

    good = WidthPolicy(6)
    good.set_costs(verify_slope=0.05, draft_cost=0.04)
    for _ in range(10):
        good.observe(6, 6)
    assert good.choose(6) == 6
    bad = WidthPolicy(6, probe_every=4)
    bad.set_costs(verify_slope=0.15, draft_cost=0.04)
    for _ in range(10):
        bad.observe(4, 0)
    picks = [bad.choose(6) for _ in range(8)]
    assert picks.count(0) == 6 and picks.count(1) == 2  # plain steps, with periodic probes
    # failed probes back off (4 -> 8 -> 16 plain steps), an accepted probe resets the interval
    gaps, streak = [], 0
    for _ in range(40):
        k = bad.choose(6)
        streak += 1
        if k:
            gaps.append(streak)
            streak = 0
            bad.observe(1, 0)
    assert gaps == [4, 8, 16], gaps
    bad.probing = True
    bad.observe(1, 1)
    assert bad.probe_interval == 4
    # an expensive verify makes even fair acceptance not worth it
    costly = WidthPolicy(4)
    costly.set_costs(verify_slope=1.0, draft_cost=0.5)
    assert costly.choose(4) == 0
    # the drafter's cost model: a block drafter pays one pass for any k, a sequential one k
    block = WidthPolicy(16, cost=lambda k: 0.3 if k else 0.0)
    seq = WidthPolicy(16, cost=lambda k: 0.3 * k)
    for p in (block, seq):
        p.set_costs(verify_slope=0.02)
        for n in (3, 5, 8, 6, 8, 4, 8, 7, 8, 5):
            p.observe(8, n)
    assert block.choose(16) > seq.choose(16) >= 1


def test_width_policy_learns_that_later_proposals_are_weaker():
    """A first proposal accepted half the time and chained ones almost never (an MTP head on
    its own state): one proposal per round, not the width one overall rate would suggest."""
    from app.engine.width import WidthPolicy

    p = WidthPolicy(4)
    p.set_costs(verify_slope=0.1, draft_cost=0.05)
    rounds = [(4, 1), (4, 0)] * 10  # first proposal: 50%; second, given the first: 0%
    for k, n in rounds:
        p.observe(k, n)
    assert p.rate(0) == pytest.approx(0.5, abs=0.1) and p.rate(1) < 0.1
    assert p.choose(4) == 1
    # the same acceptance per token spread evenly over depths pays a wider round
    even = WidthPolicy(4)
    even.set_costs(verify_slope=0.1, draft_cost=0.05)
    for _ in range(20):
        even.observe(4, 4)
        even.observe(4, 2)
    assert even.choose(4) >= 3


def test_width_policy_does_not_guess_a_deeper_proposal_better_than_the_first():
    """Rounds of one proposal accepted a third of the time: the second proposal, never
    tried, is not assumed better than the first, so rounds stay one proposal wide (a guess of
    0.6 for the untried depth would make two look worth it at these costs)."""
    from app.engine.width import WidthPolicy

    p = WidthPolicy(4)
    p.set_costs(verify_slope=0.06, draft_cost=0.09)
    for k, n in [(1, 0), (1, 0), (1, 1)] * 6:
        p.observe(k, n)
    assert p.rate(0) == pytest.approx(1 / 3, abs=0.08)
    assert p.rate(1) == pytest.approx(p.rate(0))
    assert p.choose(4) == 1


def test_width_policy_charges_what_rounds_really_cost():
    """A first proposal right one time in four pays at the warm-up's cost model (a round =
    1.15 plain steps) but not at what rounds take in the loop (1.32 steps, plus a slower plain
    step after each): measured, the policy decodes plainly; timed as modelled, it keeps
    drafting."""
    from app.engine.width import WidthPolicy

    def policy(round_ms: float, after_ms: float) -> WidthPolicy:
        p = WidthPolicy(4, probe_every=1000)
        p.set_costs(verify_slope=0.06, draft_cost=0.09)
        for i in range(24):  # one round, then three plain steps, over and over
            p.observe(1, int(i % 4 == 0))
            p.observe_time(1, round_ms)
            p.observe_time(0, after_ms)
            p.observe_time(0, 50.0)
            p.observe_time(0, 50.0)
        return p

    honest = policy(57.5, 50.0)
    assert honest.overhead == pytest.approx(0.0, abs=1e-6)
    assert honest.choose(4) == 1
    slow = policy(66.0, 56.0)
    assert slow.step_ms == pytest.approx(50.0)
    assert slow.overhead == pytest.approx((66.0 + 6.0) / 50.0 - 1.15, abs=1e-3)
    assert slow.round_cost(1) == pytest.approx(1.44, abs=1e-3)
    assert slow.choose(4) == 0
    # back-to-back rounds are charged one by one, with no plain step between them
    busy = WidthPolicy(2)
    busy.set_costs(verify_slope=0.06, draft_cost=0.09)
    busy.observe_time(0, 50.0)
    for _ in range(10):
        busy.observe_time(1, 60.0)
    assert busy.overhead_n == 9 and busy.overhead == pytest.approx(60.0 / 50.0 - 1.15, abs=1e-3)


def test_width_policy_never_believes_a_round_cheaper_than_warm_up_said():
    """Rounds timed below the model (warm-up guessed them dearer): the overhead stays at
    zero, so a first proposal right one time in ten still means plain decoding."""
    from app.engine.width import WidthPolicy

    p = WidthPolicy(4, probe_every=1000)
    p.set_costs(verify_slope=0.1, draft_cost=0.06)
    for i in range(30):
        p.observe(1, int(i % 10 == 0))
        p.observe_time(0, 60.0)
        p.observe_time(1, 50.0)  # 0.83 steps: cheaper than a plain step
        p.observe_time(0, 60.0)
    assert p.overhead == 0.0 and p.round_cost(1) == pytest.approx(1.16)
    assert p.choose(4) == 0


def test_a_copy_round_is_neither_the_rounds_cost_nor_a_plain_steps_time():
    """A round the policy did not size (a copy round beside the drafter) closes an open round
    with what it measured, and the plain step after it (carrying the copy round's trailing
    work) changes neither the plain-step time nor the rounds' overhead."""
    from app.engine.width import WidthPolicy

    p = WidthPolicy(4)
    p.set_costs(verify_slope=0.1, draft_cost=0.1)
    for _ in range(5):
        p.observe_time(0, 50.0)
    p.observe_time(1, 60.0)  # exactly the modelled 1.2 steps
    p.observe_other()
    assert p.overhead == pytest.approx(0.0, abs=1e-9) and p.overhead_n == 1
    step, overhead = p.step_ms, p.overhead
    p.observe_time(0, 500.0)  # the plain step after the copy round
    assert p.step_ms == step and p.overhead == overhead and p.overhead_n == 1
    p.observe_time(0, 50.0)  # the next plain step counts again
    assert p.step_ms == pytest.approx(50.0)
    # without the copy round, the same slow step would have been charged to the round
    q = WidthPolicy(4)
    q.set_costs(verify_slope=0.1, draft_cost=0.1)
    for _ in range(5):
        q.observe_time(0, 50.0)
    q.observe_time(1, 60.0)
    q.observe_time(0, 500.0)
    assert q.overhead > 1.0
